// Why a room failed (FailureCause) and where (FailureStage), as typed values instead of
// free-form strings: managers branch on them, metrics label by them (stable snake_case
// labels below), Python reads them from KVTransferError. The human message stays a
// separate reason string.
//
// The numeric values travel on the wire (TransferStatus, Abort) and are mirrored by
// python/pdkv/failure.py: append new causes, never renumber. A value this build does not
// know (a newer peer) reads as kInternal / no stage.
//
// Thread safety: pure functions and value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kv/room/room_state.h"

namespace pdkv::kv {

enum class FailureCause : uint8_t {
  kInternal = 0,           // anything not named below (a bug, an unexpected status)
  kBootstrapTimeout = 1,   // the room was not bootstrapped within the bootstrap timeout
  kWaitingTimeout = 2,     // bootstrapped, but the transfer did not end within the waiting timeout
  kMetadataTimeout = 3,    // every byte written, the first token never published
  kPeerDead = 4,           // liveness: the other side stopped answering or its process is gone
  kPeerRestarted = 5,      // the other side is a new process at the same endpoint
  kLinkLost = 6,           // the transfer connection failed after every retry
  kAbortedByPeer = 7,      // the other side aborted the room
  kAbortedLocally = 8,     // this side's engine called abort()
  kLayoutMismatch = 9,     // layouts differ: registration refused, or no route to the prefill
  kBadPreAllocation = 10,  // a malformed pre-allocation (unknown decode, bad indices)
  kOutOfRange = 11,        // a destination outside registered memory; a rejected batch
  kChecksumMismatch = 12,  // PDKV_VERIFY_CHECKSUM: the bytes that landed differ
  kBootstrapFailed = 13,   // the registry answered without a usable route, or the route vanished
                           // while the room bootstrapped (etcd: the rank left the registry)
  kShutdown = 14,          // this rank's manager shut down with the room open
  kUnauthenticated = 15,   // the peer refused our control handshake: cluster secrets differ
  kDeviceFault = 16,       // this process's CUDA context failed for good (an illegal address,
                           // a launch failure): its device memory cannot be moved any more
};
inline constexpr uint8_t kMaxFailureCause = 16;

// The room's progress when it failed. Derived from its state (RoomState) unless the
// failing code knows better (kCompletion: every byte was written already).
enum class FailureStage : uint8_t {
  kBootstrap = 0,   // finding the peers, registering, exchanging pre-allocations
  kWaiting = 1,     // bootstrapped, waiting for the engine's chunks / the prefill
  kTransfer = 2,    // bytes in flight
  kCompletion = 3,  // bytes written: status, first token, end-to-end check
};
inline constexpr uint8_t kMaxFailureStage = 3;

// One room's failure: what the board keeps and a status message carries.
struct RoomFailure {
  FailureCause cause = FailureCause::kInternal;
  FailureStage stage = FailureStage::kBootstrap;
  std::string reason;  // the human message: names the room, the peer, the limit
};

// Stable snake_case labels ("bootstrap_timeout", "peer_dead", ...): metric label values
// and the Python side's names. Never changed once released.
std::string_view to_string(FailureCause cause);
std::string_view to_string(FailureStage stage);

// Wire values; nullopt for a value this build does not know.
std::optional<FailureCause> failure_cause_from_wire(uint8_t value);
std::optional<FailureStage> failure_stage_from_wire(uint8_t value);

// The stage of a room failing while in `state` (a terminal state maps to kCompletion).
FailureStage stage_of(RoomState state);

// The cause a peer reported, as this side names it: the peer's own abort is an abort by
// the peer here; everything else (a link it lost, a layout it refused) keeps its name.
FailureCause as_seen_by_peer(FailureCause cause);

}  // namespace pdkv::kv
