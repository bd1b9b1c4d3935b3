#include "kv/room/failure_cause.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace pdkv::kv {
namespace {

// Metric labels and the Python names: pinned, since dashboards and alerts key on them.
TEST(FailureCause, LabelsAreStableSnakeCase) {
  EXPECT_EQ(to_string(FailureCause::kInternal), "internal");
  EXPECT_EQ(to_string(FailureCause::kBootstrapTimeout), "bootstrap_timeout");
  EXPECT_EQ(to_string(FailureCause::kWaitingTimeout), "waiting_timeout");
  EXPECT_EQ(to_string(FailureCause::kMetadataTimeout), "metadata_timeout");
  EXPECT_EQ(to_string(FailureCause::kPeerDead), "peer_dead");
  EXPECT_EQ(to_string(FailureCause::kPeerRestarted), "peer_restarted");
  EXPECT_EQ(to_string(FailureCause::kLinkLost), "link_lost");
  EXPECT_EQ(to_string(FailureCause::kAbortedByPeer), "aborted_by_peer");
  EXPECT_EQ(to_string(FailureCause::kAbortedLocally), "aborted_locally");
  EXPECT_EQ(to_string(FailureCause::kLayoutMismatch), "layout_mismatch");
  EXPECT_EQ(to_string(FailureCause::kBadPreAllocation), "bad_pre_allocation");
  EXPECT_EQ(to_string(FailureCause::kOutOfRange), "out_of_range");
  EXPECT_EQ(to_string(FailureCause::kChecksumMismatch), "checksum_mismatch");
  EXPECT_EQ(to_string(FailureCause::kBootstrapFailed), "bootstrap_failed");
  EXPECT_EQ(to_string(FailureCause::kShutdown), "shutdown");
}

TEST(FailureCause, EveryWireValueHasItsOwnLabel) {
  std::set<std::string> seen;
  for (unsigned v = 0; v <= kMaxFailureCause; ++v) {
    auto cause = failure_cause_from_wire(static_cast<uint8_t>(v));
    ASSERT_TRUE(cause.has_value()) << v;
    EXPECT_EQ(static_cast<unsigned>(*cause), v);
    std::string label(to_string(*cause));
    EXPECT_EQ(label.find_first_not_of("abcdefghijklmnopqrstuvwxyz_"), std::string::npos) << label;
    EXPECT_TRUE(seen.insert(label).second) << "duplicate label " << label;
  }
}

TEST(FailureCause, UnknownWireValuesAreRejected) {
  EXPECT_FALSE(failure_cause_from_wire(kMaxFailureCause + 1).has_value());
  EXPECT_FALSE(failure_cause_from_wire(255).has_value());
  EXPECT_FALSE(failure_stage_from_wire(kMaxFailureStage + 1).has_value());
}

TEST(FailureStage, LabelsAndWireValues) {
  EXPECT_EQ(to_string(FailureStage::kBootstrap), "bootstrap");
  EXPECT_EQ(to_string(FailureStage::kWaiting), "waiting");
  EXPECT_EQ(to_string(FailureStage::kTransfer), "transfer");
  EXPECT_EQ(to_string(FailureStage::kCompletion), "completion");
  for (unsigned v = 0; v <= kMaxFailureStage; ++v) {
    auto stage = failure_stage_from_wire(static_cast<uint8_t>(v));
    ASSERT_TRUE(stage.has_value());
    EXPECT_EQ(static_cast<unsigned>(*stage), v);
  }
}

TEST(FailureStage, FollowsTheRoomState) {
  EXPECT_EQ(stage_of(RoomState::kBootstrapping), FailureStage::kBootstrap);
  EXPECT_EQ(stage_of(RoomState::kWaitingForInput), FailureStage::kWaiting);
  EXPECT_EQ(stage_of(RoomState::kTransferring), FailureStage::kTransfer);
  EXPECT_EQ(stage_of(RoomState::kSuccess), FailureStage::kCompletion);
}

TEST(FailureCause, APeersOwnAbortIsAnAbortByThePeerHere) {
  EXPECT_EQ(as_seen_by_peer(FailureCause::kAbortedLocally), FailureCause::kAbortedByPeer);
  EXPECT_EQ(as_seen_by_peer(FailureCause::kAbortedByPeer), FailureCause::kAbortedByPeer);
  EXPECT_EQ(as_seen_by_peer(FailureCause::kOutOfRange), FailureCause::kOutOfRange);
  EXPECT_EQ(as_seen_by_peer(FailureCause::kLinkLost), FailureCause::kLinkLost);
}

}  // namespace
}  // namespace pdkv::kv
