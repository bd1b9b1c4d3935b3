#include "kv/transfer_retry.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;

const TransferRetryPolicy kPolicy{3, milliseconds(1)};
bool never() { return false; }

TEST(TransferRetryTest, ATransientFailureIsRetriedUntilItSucceeds) {
  int calls = 0;
  Status s = retry_transient(
      kPolicy,
      [&](int attempt) {
        EXPECT_EQ(attempt, calls);
        ++calls;
        return calls < 3 ? unavailable("connection reset") : Status();
      },
      never);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(calls, 3);
}

TEST(TransferRetryTest, AttemptsAreBoundedAndTheLastErrorIsReturned) {
  int calls = 0;
  Status s = retry_transient(
      kPolicy, [&](int) { return unavailable("reset #" + std::to_string(++calls)); }, never);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("reset #3"), std::string::npos) << s.to_string();
  EXPECT_EQ(calls, 3);
}

TEST(TransferRetryTest, NonTransientErrorsAreNotRetried) {
  for (Status err : {invalid_argument("block outside the region"), data_loss("peer rejected"),
                     deadline_exceeded("no progress"), aborted("room ended")}) {
    int calls = 0;
    Status s = retry_transient(
        kPolicy,
        [&](int) {
          ++calls;
          return err;
        },
        never);
    EXPECT_EQ(s.code(), err.code());
    EXPECT_EQ(calls, 1) << err.to_string();
  }
}

TEST(TransferRetryTest, GiveUpStopsRetrying) {
  int calls = 0;
  Status s = retry_transient(
      kPolicy,
      [&](int) {
        ++calls;
        return unavailable("reset");
      },
      [] { return true; });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(calls, 1);
}

TEST(TransferRetryTest, OneAttemptMeansNoRetry) {
  int calls = 0;
  (void)retry_transient(
      {1, milliseconds(1)},
      [&](int) {
        ++calls;
        return unavailable("reset");
      },
      never);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace pdkv::kv
