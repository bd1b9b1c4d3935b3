#include "kv/pipeline/failed_peer_tracker.h"

#include <gtest/gtest.h>

#include <string>

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;

TEST(FailedPeerTrackerTest, FirstFailureRefusesForTheFirstCooldownOnly) {
  FailedPeerTracker tracker(milliseconds(30'000), milliseconds(1000));
  TimePoint t0 = now();
  tracker.mark_failed("10.0.0.2:7000", t0, t0);
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
    tracker.mark_failed("p:1", /*began=*/t, t);  // a probe, begun after the last failure
    EXPECT_EQ(tracker.refused_for("p:1", t).count(), want);
    t += milliseconds(want);  // the probe after the cooldown fails again
    EXPECT_FALSE(tracker.is_failed("p:1", t));
  }
  EXPECT_EQ(tracker.failure_count("p:1"), 1);
}

TEST(FailedPeerTrackerTest, SuccessClosesTheBreaker) {
  FailedPeerTracker tracker(milliseconds(5000), milliseconds(100));
  TimePoint t0 = now();
  tracker.mark_failed("p:1", t0, t0);
  tracker.mark_failed("p:1", t0, t0);
  EXPECT_EQ(tracker.failure_count("p:1"), 2);
  tracker.record_success("p:1");
  EXPECT_EQ(tracker.failure_count("p:1"), 0);
  const TimePoint t1 = now();
  tracker.mark_failed("p:1", t1, t1);
  EXPECT_EQ(tracker.refused_for("p:1", t1).count(), 100);  // back to the first cooldown
}

TEST(FailedPeerTrackerTest, AMarkOlderThanTheTtlIsForgotten) {
  FailedPeerTracker tracker(milliseconds(1000), milliseconds(5000));  // cooldown capped at TTL
  TimePoint t0 = now();
  tracker.mark_failed("p:1", t0, t0);
  EXPECT_TRUE(tracker.is_failed("p:1", t0 + milliseconds(999)));
  EXPECT_FALSE(tracker.is_failed("p:1", t0 + milliseconds(1000)));
  EXPECT_EQ(tracker.failure_count("p:1"), 0);
}

TEST(FailedPeerTrackerTest, ClearForgetsThePeer) {
  FailedPeerTracker tracker(milliseconds(1000));
  tracker.mark_failed("[::1]:7000", now());
  tracker.mark_failed("[::1]:7000", now());
  EXPECT_EQ(tracker.failure_count("[::1]:7000"), 2);
  tracker.clear("[::1]:7000");
  EXPECT_FALSE(tracker.is_failed("[::1]:7000"));
}

TEST(FailedPeerTrackerTest, NonPositiveTtlDisablesTracking) {
  FailedPeerTracker tracker(milliseconds(0));
  tracker.mark_failed("a:1", now());
  EXPECT_FALSE(tracker.is_failed("a:1"));
}

TEST(FailedPeerTrackerTest, AttemptsInFlightWhenItOpenedAreOneFailureNotARow) {
  // A cut link fails every attempt that was under way, one after another: the breaker
  // opens once, and their failures do not double its cooldown (chaos R3 saw 8 s).
  FailedPeerTracker tracker(milliseconds(30'000), milliseconds(1000));
  const TimePoint began = now();
  const TimePoint t = began + milliseconds(1500);
  for (int i = 0; i < 4; ++i) tracker.mark_failed("p:1", began, t + milliseconds(100 * i));
  EXPECT_EQ(tracker.failure_count("p:1"), 1);
  EXPECT_EQ(tracker.refused_for("p:1", t).count(), 1000);
  // The probe after the cooldown fails: that one doubles it.
  const TimePoint probe = t + milliseconds(1000);
  tracker.mark_failed("p:1", probe, probe + milliseconds(10));
  EXPECT_EQ(tracker.failure_count("p:1"), 2);
  EXPECT_EQ(tracker.refused_for("p:1", probe + milliseconds(10)).count(), 2000);
}

TEST(FailedPeerTrackerTest, AFailureOfAnAttemptBegunBeforeTheBreakerClosedIsStale) {
  FailedPeerTracker tracker(milliseconds(30'000), milliseconds(1000));
  const TimePoint began = now();
  tracker.clear("p:1");  // the peer registered again after the attempt began
  tracker.mark_failed("p:1", began, now());
  EXPECT_FALSE(tracker.is_failed("p:1"));
  EXPECT_EQ(tracker.failure_count("p:1"), 0);
  // One begun after it counts.
  const TimePoint later = now();
  tracker.mark_failed("p:1", later, later);
  EXPECT_TRUE(tracker.is_failed("p:1", later));
}

TEST(FailedPeerTrackerTest, ASignOfLifeEndsTheCooldownButKeepsTheCount) {
  FailedPeerTracker tracker(milliseconds(30'000), milliseconds(1000));
  const TimePoint t0 = now();
  tracker.mark_failed("p:1", t0, t0);
  EXPECT_TRUE(tracker.is_failed("p:1", t0 + milliseconds(10)));
  tracker.end_cooldown("p:1", t0 + milliseconds(10));
  EXPECT_FALSE(tracker.is_failed("p:1", t0 + milliseconds(10)));  // the next is a probe
  EXPECT_EQ(tracker.failure_count("p:1"), 1);
  // The probe fails: refused again, for twice as long.
  const TimePoint probe = t0 + milliseconds(20);
  tracker.mark_failed("p:1", probe, probe);
  EXPECT_EQ(tracker.refused_for("p:1", probe).count(), 2000);
  tracker.end_cooldown("q:9", probe);  // a peer that never failed: nothing to end
  EXPECT_FALSE(tracker.is_failed("q:9", probe));
}

TEST(FailedPeerTrackerTest, ManyPeersThatWentAwayAreSweptAfterTheTtl) {
  FailedPeerTracker tracker(milliseconds(1000), milliseconds(100));
  const TimePoint t0 = now();
  for (int i = 0; i < 100; ++i) tracker.mark_failed("old:" + std::to_string(i), t0, t0);
  // A TTL later, the next mark sweeps them all (their failures have aged out).
  const TimePoint t1 = t0 + milliseconds(1500);
  tracker.mark_failed("new:1", t1, t1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(tracker.failure_count("old:" + std::to_string(i)), 0);
  EXPECT_EQ(tracker.failure_count("new:1"), 1);
}

}  // namespace
}  // namespace pdkv::kv
