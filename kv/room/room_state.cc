#include "kv/room/room_state.h"

namespace pdkv::kv {

std::string_view room_state_name(RoomState s) {
  switch (s) {
    case RoomState::kFailed: return "Failed";
    case RoomState::kBootstrapping: return "Bootstrapping";
    case RoomState::kWaitingForInput: return "WaitingForInput";
    case RoomState::kTransferring: return "Transferring";
    case RoomState::kSuccess: return "Success";
  }
  return "Unknown";
}

}  // namespace pdkv::kv
