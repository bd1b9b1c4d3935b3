#include "kv/failed_peer_tracker.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;

TEST(FailedPeerTrackerTest, FirstFailureRefusesForTheFirstCooldownOnly) {
  FailedPeerTracker tracker(milliseconds(30'000), milliseconds(1000));
  TimePoint t0 = now();
  tracker.mark_failed("10.0.0.2:7000", t0);
  EXPECT_TRUE(tracker.is_failed("10.0.0.2:7000", t0 + milliseconds(999)));
  EXPECT_FALSE(tracker.is_failed("10.0.0.2:70", t0));
  EXPECT_EQ(tracker.refused_for("10.0.0.2:7000", t0 + milliseconds(400)).count(), 600);
  // Cooldown over: the next transfer is a probe. The failure is still remembered.
  EXPECT_FALSE(tracker.is_failed("10.0.0.2:7000", t0 + milliseconds(1000)));
  EXPECT_EQ(tracker.failure_count("10.0.0.2:7000"), 1);
}

TEST(FailedPeerTrackerTest, FailuresInARowDoubleTheCooldownUpToTheTtl) {
  FailedPeerTracker tracker(milliseconds(5000), milliseconds(1000));
  TimePoint t = now();
  // At the cap the refusal lasts the whole TTL, so the mark has aged out when it ends and
  // the next failure starts again from the first cooldown.
  const int64_t expected[] = {1000, 2000, 4000, 5000, 1000};
  for (int64_t want : expected) {
    tracker.mark_failed("p:1", t);
    EXPECT_EQ(tracker.refused_for("p:1", t).count(), want);
    t += milliseconds(want);  // the probe after the cooldown fails again
    EXPECT_FALSE(tracker.is_failed("p:1", t));
  }
  EXPECT_EQ(tracker.failure_count("p:1"), 1);
}

TEST(FailedPeerTrackerTest, SuccessClosesTheBreaker) {
  FailedPeerTracker tracker(milliseconds(5000), milliseconds(100));
  TimePoint t0 = now();
  tracker.mark_failed("p:1", t0);
  tracker.mark_failed("p:1", t0);
  tracker.record_success("p:1");
  EXPECT_EQ(tracker.failure_count("p:1"), 0);
  tracker.mark_failed("p:1", t0);
  EXPECT_EQ(tracker.refused_for("p:1", t0).count(), 100);  // back to the first cooldown
}

TEST(FailedPeerTrackerTest, AMarkOlderThanTheTtlIsForgotten) {
  FailedPeerTracker tracker(milliseconds(1000), milliseconds(5000));  // cooldown capped at TTL
  TimePoint t0 = now();
  tracker.mark_failed("p:1", t0);
  EXPECT_TRUE(tracker.is_failed("p:1", t0 + milliseconds(999)));
  EXPECT_FALSE(tracker.is_failed("p:1", t0 + milliseconds(1000)));
  EXPECT_EQ(tracker.failure_count("p:1"), 0);
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
