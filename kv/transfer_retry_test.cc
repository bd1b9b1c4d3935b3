#include "kv/transfer_retry.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;

TEST(TransferRetryTest, OnlyConnectionFailuresAreTransient) {
  EXPECT_TRUE(is_transient_transfer_error(unavailable("connection reset")));
  EXPECT_FALSE(is_transient_transfer_error(out_of_range("block 3 outside registered memory")));
  EXPECT_FALSE(is_transient_transfer_error(deadline_exceeded("no progress for 5000 ms")));
  EXPECT_FALSE(is_transient_transfer_error(invalid_argument("overflow")));
  EXPECT_FALSE(is_transient_transfer_error(Status()));
}

TEST(TransferRetryTest, BackoffDoublesFromTheFirstAndIsCapped) {
  EXPECT_EQ(retry_backoff(milliseconds(50), 1), milliseconds(50));
  EXPECT_EQ(retry_backoff(milliseconds(50), 2), milliseconds(100));
  EXPECT_EQ(retry_backoff(milliseconds(50), 3), milliseconds(200));
  EXPECT_EQ(retry_backoff(milliseconds(1), 40), milliseconds(1024));
  EXPECT_EQ(retry_backoff(milliseconds(50), 0), milliseconds(50));
}

}  // namespace
}  // namespace pdkv::kv
