#include "kv/pipeline/transfer_retry.h"

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

// A decode that cancelled a room refuses the rest of its bytes with a proper ACK; that is
// its policy for those blocks, and must not read as the decode being gone (the breaker
// would then fail its other rooms). Only failures of the link or the peer count.
TEST(TransferRetryTest, RefusalsAndOurOwnClosesNeverCountAgainstThePeer) {
  EXPECT_EQ(classify_batch_failure(out_of_range("entry 2 is not inside registered memory")),
            BatchFailure::kRefused);
  EXPECT_EQ(classify_batch_failure(already_completed("whose room already succeeded")),
            BatchFailure::kRefused);
  EXPECT_EQ(classify_batch_failure(invalid_argument("block overflows")), BatchFailure::kRefused);
  EXPECT_EQ(classify_batch_failure(failed_precondition("backend carries no notes")),
            BatchFailure::kUnmovable);
  EXPECT_EQ(classify_batch_failure(failed_precondition("staging device memory: CUDA_ERROR")),
            BatchFailure::kUnmovable);
  EXPECT_EQ(classify_batch_failure(aborted("session closed")), BatchFailure::kClosedHere);
  EXPECT_EQ(classify_batch_failure(unavailable("connection reset")), BatchFailure::kPeerLost);
  EXPECT_EQ(classify_batch_failure(deadline_exceeded("no progress for 5000 ms")),
            BatchFailure::kPeerLost);
  EXPECT_EQ(classify_batch_failure(data_loss("unexpected ACK")), BatchFailure::kPeerLost);
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
