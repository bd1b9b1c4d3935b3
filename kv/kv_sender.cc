#include "kv/kv_sender.h"

namespace pdkv::kv {
namespace {

Status failure_of(const RoomStatus& s, uint64_t room) {
  if (s.state != RoomState::kFailed) return Status();
  return aborted(
      "room " + std::to_string(room) + ": " +
      (s.failure_reason.empty() ? "unknown reason from another rank" : s.failure_reason));
}

}  // namespace

KVSender::KVSender(PrefillManager& manager, uint64_t room)
    : manager_(manager), room_(room), handle_(manager.open_room(room)) {}

Status KVSender::init(int64_t num_pages, std::optional<int64_t> aux_index) {
  if (is_terminal(poll())) return Status();
  return manager_.init_room(room_, num_pages, aux_index);
}

Status KVSender::send(std::span<const int64_t> pages, std::span<const int64_t> state_slots,
                      std::optional<ChunkOwnership> ownership, std::optional<bool> layerwise,
                      engine::SourceReady sources) {
  return send_groups(pages, StateSlotLists{state_slots, {}}, std::move(ownership), layerwise,
                     std::move(sources));
}

Status KVSender::send_groups(std::span<const int64_t> pages, StateSlotLists state,
                             std::optional<ChunkOwnership> ownership, std::optional<bool> layerwise,
                             engine::SourceReady sources) {
  if (is_terminal(poll())) return Status();
  Status sent =
      manager_.send_chunk(room_, pages, state, std::move(ownership), layerwise, std::move(sources));
  // The room may have ended between poll() and send_chunk(): that is not the caller's error.
  if (sent.code() == StatusCode::kNotFound && is_terminal(poll())) return Status();
  return sent;
}

Status KVSender::failure() const { return failure_of(handle_->status(), room_); }

void KVSender::abort(const std::string& reason) { manager_.abort_room(room_, reason); }

KVReceiver::KVReceiver(DecodeManager& manager, uint64_t room, const std::string& bootstrap_addr)
    : manager_(manager), room_(room), handles_(manager.open_room(room, bootstrap_addr)) {}

Status KVReceiver::init(std::optional<int64_t> prefill_dp_rank) {
  if (is_terminal(poll())) return Status();
  return manager_.init_room(room_, prefill_dp_rank);
}

Status KVReceiver::send_metadata(PreAllocationRequest request) {
  if (is_terminal(poll())) return Status();
  Status sent = manager_.send_metadata(room_, std::move(request));
  if (sent.code() == StatusCode::kNotFound && is_terminal(poll())) return Status();
  return sent;
}

Status KVReceiver::failure() const { return failure_of(handles_.status->status(), room_); }

void KVReceiver::abort(const std::string& reason) { manager_.abort_room(room_, reason); }

}  // namespace pdkv::kv
