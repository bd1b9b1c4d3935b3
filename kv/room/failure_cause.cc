#include "kv/room/failure_cause.h"

namespace pdkv::kv {

std::string_view to_string(FailureCause cause) {
  switch (cause) {
    case FailureCause::kInternal: return "internal";
    case FailureCause::kBootstrapTimeout: return "bootstrap_timeout";
    case FailureCause::kWaitingTimeout: return "waiting_timeout";
    case FailureCause::kMetadataTimeout: return "metadata_timeout";
    case FailureCause::kPeerDead: return "peer_dead";
    case FailureCause::kPeerRestarted: return "peer_restarted";
    case FailureCause::kLinkLost: return "link_lost";
    case FailureCause::kAbortedByPeer: return "aborted_by_peer";
    case FailureCause::kAbortedLocally: return "aborted_locally";
    case FailureCause::kLayoutMismatch: return "layout_mismatch";
    case FailureCause::kBadPreAllocation: return "bad_pre_allocation";
    case FailureCause::kOutOfRange: return "out_of_range";
    case FailureCause::kChecksumMismatch: return "checksum_mismatch";
    case FailureCause::kBootstrapFailed: return "bootstrap_failed";
    case FailureCause::kShutdown: return "shutdown";
    case FailureCause::kUnauthenticated: return "unauthenticated";
    case FailureCause::kDeviceFault: return "device_fault";
  }
  return "internal";
}

std::string_view to_string(FailureStage stage) {
  switch (stage) {
    case FailureStage::kBootstrap: return "bootstrap";
    case FailureStage::kWaiting: return "waiting";
    case FailureStage::kTransfer: return "transfer";
    case FailureStage::kCompletion: return "completion";
  }
  return "bootstrap";
}

std::optional<FailureCause> failure_cause_from_wire(uint8_t value) {
  if (value > kMaxFailureCause) return std::nullopt;
  return static_cast<FailureCause>(value);
}

std::optional<FailureStage> failure_stage_from_wire(uint8_t value) {
  if (value > kMaxFailureStage) return std::nullopt;
  return static_cast<FailureStage>(value);
}

FailureStage stage_of(RoomState state) {
  switch (state) {
    case RoomState::kBootstrapping: return FailureStage::kBootstrap;
    case RoomState::kWaitingForInput: return FailureStage::kWaiting;
    case RoomState::kTransferring: return FailureStage::kTransfer;
    case RoomState::kFailed:
    case RoomState::kSuccess: return FailureStage::kCompletion;
  }
  return FailureStage::kBootstrap;
}

FailureCause as_seen_by_peer(FailureCause cause) {
  return cause == FailureCause::kAbortedLocally ? FailureCause::kAbortedByPeer : cause;
}

}  // namespace pdkv::kv
