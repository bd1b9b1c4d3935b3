#include "kv/failed_peer_tracker.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;

TEST(FailedPeerTrackerTest, MarkedPeerIsRefusedUntilTtlExpires) {
  FailedPeerTracker tracker(milliseconds(1000));
  TimePoint t0 = now();
  tracker.mark_failed("10.0.0.2:7000", t0);
  EXPECT_TRUE(tracker.is_failed("10.0.0.2:7000", t0 + milliseconds(999)));
  EXPECT_FALSE(tracker.is_failed("10.0.0.2:70", t0));
  EXPECT_FALSE(tracker.is_failed("10.0.0.2:7000", t0 + milliseconds(1000)));
  EXPECT_EQ(tracker.failure_count("10.0.0.2:7000"), 0);  // expired mark removed
}

TEST(FailedPeerTrackerTest, ClearForgetsThePeer) {
  FailedPeerTracker tracker(milliseconds(1000));
  tracker.mark_failed("[::1]:7000");
  tracker.mark_failed("[::1]:7000");
  EXPECT_EQ(tracker.failure_count("[::1]:7000"), 2);
  tracker.clear("[::1]:7000");
  EXPECT_FALSE(tracker.is_failed("[::1]:7000"));
}

TEST(FailedPeerTrackerTest, NonPositiveTtlDisablesTracking) {
  FailedPeerTracker tracker(milliseconds(0));
  tracker.mark_failed("a:1");
  EXPECT_FALSE(tracker.is_failed("a:1"));
}

}  // namespace
}  // namespace pdkv::kv
