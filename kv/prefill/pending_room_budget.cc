#include "kv/prefill/pending_room_budget.h"

#include "plan/types.h"

namespace pdkv::kv {

Status PendingRoomBudget::charge(uint64_t room, const std::string& decode, uint64_t bytes) {
  auto held = rooms_.find(room);
  const bool new_room = held == rooms_.end();
  DecodeUse& use = decodes_[decode];  // erased again below if nothing is charged
  uint64_t before = 0;
  if (!new_room) {
    auto it = held->second.bytes.find(decode);
    if (it != held->second.bytes.end()) before = it->second;
  }
  Status refused;
  if (new_room && rooms_.size() >= limits_.max_rooms) {
    refused =
        failed_precondition("this prefill rank already holds " + std::to_string(rooms_.size()) +
                            " rooms that decodes opened before their KVSender "
                            "(PDKV_MAX_PENDING_ROOMS)");
  } else if (new_room && use.rooms >= limits_.max_rooms_per_decode) {
    refused = failed_precondition(
        "decode " + decode + " already holds " + std::to_string(use.rooms) +
        " rooms here that it opened before their KVSender (PDKV_MAX_PENDING_ROOMS_PER_DECODE)");
  } else if (use.bytes - before + bytes > limits_.max_bytes_per_decode) {
    refused =
        failed_precondition("decode " + decode + " already holds " + std::to_string(use.bytes) +
                            " bytes of pre-allocations here that wait for their KVSender "
                            "(PDKV_MAX_PENDING_BYTES_PER_DECODE)");
  }
  if (!refused.ok()) {
    if (use.rooms == 0 && use.bytes == 0) decodes_.erase(decode);
    return refused;
  }
  if (new_room) {
    held = rooms_.emplace(room, RoomCharges{decode, {}}).first;
    ++use.rooms;
  }
  held->second.bytes[decode] = bytes;
  use.bytes = use.bytes - before + bytes;
  return Status();
}

void PendingRoomBudget::release(uint64_t room) {
  auto held = rooms_.find(room);
  if (held == rooms_.end()) return;
  uncharge(held->second.opener, 1, 0);
  for (const auto& [decode, bytes] : held->second.bytes) uncharge(decode, 0, bytes);
  rooms_.erase(held);
}

void PendingRoomBudget::uncharge(const std::string& decode, size_t rooms, uint64_t bytes) {
  auto it = decodes_.find(decode);
  if (it == decodes_.end()) return;
  it->second.rooms -= rooms;
  it->second.bytes -= bytes;
  if (it->second.rooms == 0 && it->second.bytes == 0) decodes_.erase(it);
}

size_t PendingRoomBudget::rooms_of(const std::string& decode) const {
  auto it = decodes_.find(decode);
  return it == decodes_.end() ? 0 : it->second.rooms;
}

uint64_t PendingRoomBudget::bytes_of(const std::string& decode) const {
  auto it = decodes_.find(decode);
  return it == decodes_.end() ? 0 : it->second.bytes;
}

uint64_t pre_allocation_cost(const proto::PreAllocation& pre, bool fragments_shared) {
  // The lists as the prefill keeps them (8-byte indices, whole fragments, a mask byte and
  // an index per L1.5 page) plus a fixed share for the room's and plan's bookkeeping.
  const size_t l1_5 = pre.dst_l1_5 ? pre.dst_l1_5->page_transfer_mask.size() +
                                         8 * pre.dst_l1_5->page_local_indices.size()
                                   : 0;
  return 512 + 8 * (pre.dst_kv_pages.size() + pre.state_slots.size()) +
         (fragments_shared ? 0 : sizeof(plan::Fragment) * pre.fragments.size()) + l1_5;
}

}  // namespace pdkv::kv
