// The per-request ("room") state machine shared by prefill and decode.
//
// Values follow the engines' KVPoll (sglang): Failed 0, Bootstrapping 1,
// WaitingForInput 2 (the reference's "Bootstrapped"), Transferring 3, Success 4.
// Transitions are monotonic: a room only moves forward, Failed and Success are
// terminal, and Failed wins over everything (a late Success cannot revive a failed room;
// engines all-reduce poll() with MIN across a TP group and rely on it).
// merge_room_state() is the one place that rule lives.
//
// One name per role of a room (one request, bootstrap_room) in kv/:
//   RoomState       where the room is in its lifecycle (this enum; KVPoll's values);
//   RoomStatus      a snapshot: its RoomState and, once Failed, the failure
//                   (room_status_board.h);
//   RoomHandle      what a KVSender / KVReceiver polls; outlives the tables;
//   RoomStatusBoard every room's status and deadline on one manager: the one place a
//                   manager keeps and reads a room's lifecycle;
//   PrefillRoom, DecodeRoom  a manager's protocol record of the room (its destinations or
//                   targets, chunks, grant, ticket; prefill_manager.h, decode_manager.h),
//                   no copy of its lifecycle (whether it is bootstrapped or transferring
//                   is its RoomState on the board);
//   RoomTransfer    what of the room the prefill's pipeline still has to move
//                   (transfer_pipeline.h).
#pragma once

#include <cstdint>
#include <string_view>

namespace pdkv::kv {

enum class RoomState : uint8_t {
  kFailed = 0,
  kBootstrapping = 1,
  kWaitingForInput = 2,
  kTransferring = 3,
  kSuccess = 4,
};

inline bool is_terminal(RoomState s) { return s == RoomState::kFailed || s == RoomState::kSuccess; }

// The state a room has after `incoming` is applied to `current`.
inline RoomState merge_room_state(RoomState current, RoomState incoming) {
  if (current == RoomState::kFailed || incoming == RoomState::kFailed) return RoomState::kFailed;
  if (current == RoomState::kSuccess) return RoomState::kSuccess;
  return incoming > current ? incoming : current;
}

std::string_view room_state_name(RoomState s);

}  // namespace pdkv::kv
