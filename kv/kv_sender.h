// KVSender / KVReceiver: one room's view for a serving engine's scheduler thread, the C++
// twins of the Python classes (docs/API.md). Every method but wait()
// returns at once: the managers' own threads do the waiting. poll() reads the room's handle, so it
// keeps answering with the final state after the room left the manager's tables.
//
// Thread safety: one object per room, used from one thread (the scheduler); the managers
// they point to are thread-safe. The manager must outlive its senders/receivers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "kv/decode/decode_manager.h"
#include "kv/prefill/prefill_manager.h"

namespace pdkv::kv {

class KVSender {
 public:
  KVSender(PrefillManager& manager, uint64_t room);
  // The request has num_pages pages in total.
  Status init(int64_t num_pages, std::optional<int64_t> aux_index);
  // One chunk; a chunk after the room ended is ignored (poll() already says why).
  // `layerwise`, `sources`: see PrefillManager::send_chunk.
  // `state_slots`: the single-list form (at most one state group).
  Status send(std::span<const int64_t> pages, std::span<const int64_t> state_slots = {},
              std::optional<ChunkOwnership> ownership = std::nullopt,
              std::optional<bool> layerwise = std::nullopt, engine::SourceReady sources = {});
  // The same with one list per state group (kv/state_lists.h; docs/API.md).
  Status send_groups(std::span<const int64_t> pages, StateSlotLists state,
                     std::optional<ChunkOwnership> ownership = std::nullopt,
                     std::optional<bool> layerwise = std::nullopt,
                     engine::SourceReady sources = {});
  RoomState poll() const { return handle_->status().state; }
  // Blocks until the room ends (Success or Failed) or `deadline`; returns poll() then.
  RoomState wait(TimePoint deadline) const { return handle_->wait_terminal(deadline).state; }
  // The reason of a Failed room; OK otherwise.
  Status failure() const;
  // The whole status: state, and for a Failed room its cause, stage and reason.
  RoomStatus status() const { return handle_->status(); }
  void abort(const std::string& reason = "");
  uint64_t room() const { return room_; }

 private:
  PrefillManager& manager_;
  uint64_t room_;
  std::shared_ptr<const RoomHandle> handle_;
};

class KVReceiver {
 public:
  KVReceiver(DecodeManager& manager, uint64_t room, const std::string& bootstrap_addr = "");
  Status init(std::optional<int64_t> prefill_dp_rank = std::nullopt);
  Status send_metadata(PreAllocationRequest request);
  RoomState poll() const { return handles_.status->status().state; }
  // Blocks until the room ends (Success or Failed) or `deadline`; returns poll() then.
  RoomState wait(TimePoint deadline) const {
    return handles_.status->wait_terminal(deadline).state;
  }
  Status failure() const;
  RoomStatus status() const { return handles_.status->status(); }
  void abort(const std::string& reason = "");
  // Valid once poll() is Success: -1 / empty when the prefill sent none.
  int64_t bootstrap_token() const { return handles_.metadata->bootstrap_token(); }
  std::vector<int32_t> spec_candidate_ids() const {
    return handles_.metadata->spec_candidate_ids();
  }
  uint64_t room() const { return room_; }

 private:
  DecodeManager& manager_;
  uint64_t room_;
  DecodeManager::Handles handles_;
};

}  // namespace pdkv::kv
