// DecodeManager's KVReceiver calls: open a room, start resolving it, send its
// pre-allocation (after the argument checks and its write grant), abort it.
#include <utility>

#include "kv/decode/decode_manager.h"
#include "kv/decode/room_grant.h"
#include "kv/page_ownership.h"
#include "kv/route/stage_address.h"
#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

DecodeManager::Handles DecodeManager::open_room(uint64_t room, const std::string& bootstrap_addr) {
  Handles h;
  h.status = board_.open(
      room, now() + config_.options.bootstrap_timeout, FailureCause::kBootstrapTimeout,
      "bootstrap timeout: the prefill ranks of room " + std::to_string(room) +
          " were not resolved within " + format_seconds(config_.options.bootstrap_timeout));
  MutexLock lock(mu_);
  DecodeRoom& r = rooms_[room];
  if (!r.metadata) {
    r.metadata = std::make_shared<ReceivedMetadata>();
    // A decode manager of pipeline stage pp_rank resolves the room at that stage's address.
    r.bootstrap_addr = stage_address(
        bootstrap_addr.empty() ? config_.bootstrap_addr : bootstrap_addr, config_.args.pp_rank);
    r.opened = now();
    r.ticket = random_secret_id();
  }
  h.metadata = r.metadata;
  return h;
}

Status DecodeManager::init_room(uint64_t room, std::optional<int64_t> prefill_dp_rank) {
  std::optional<std::string> refused;
  // Lane threads that finished, joined here rather than by themselves.
  std::vector<std::thread> finished = take_finished_lanes();
  for (std::thread& t : finished) t.join();
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(room);
    if (it == rooms_.end()) return not_found("room " + std::to_string(room) + " is not open here");
    if (it->second.init_requested) return Status();
    it->second.init_requested = true;
    it->second.prefill_dp_rank = prefill_dp_rank;
    // Stopping: no lane starts; shutdown fails the room.
    if (runtime_.stopping()) return Status();
    refused = queue_for_resolution(room, it->second.bootstrap_addr);
  }
  if (refused) fail_room(room, FailureCause::kBootstrapFailed, *refused, false);
  return Status();
}

Status DecodeManager::send_metadata(uint64_t room, PreAllocationRequest request) {
  if (request.decode_prefix_len % static_cast<uint64_t>(config_.args.page_size) != 0) {
    return invalid_argument("decode_prefix_len " + std::to_string(request.decode_prefix_len) +
                            " is not a multiple of page_size " +
                            std::to_string(config_.args.page_size));
  }
  for (int64_t p : request.kv_pages) {
    if (p < 0) return invalid_argument("negative destination page " + std::to_string(p));
  }
  PDKV_RETURN_IF_ERROR(check_state_lists(
      config_.args, StateSlotLists{request.state_slots, request.state_group_ends}));
  if (request.ownership && !config_.enable_mla_l1_5_cache) {
    return invalid_argument(
        "page_transfer_mask / page_indices_mapping / page_local_indices are only for a decode "
        "that runs the MLA L1.5 cache (enable_mla_l1_5_cache)");
  }
  if (config_.enable_mla_l1_5_cache) {
    if (!request.ownership) {
      return invalid_argument(
          "this decode runs the MLA L1.5 cache (enable_mla_l1_5_cache): send_metadata needs "
          "page_transfer_mask, page_indices_mapping and page_local_indices");
    }
    RequestOwnership& own = *request.ownership;
    if (!own.page_indices_mapping) {
      std::vector<int64_t> mapping(own.page_transfer_mask.size());
      int64_t owned = -1;
      for (size_t i = 0; i < mapping.size(); ++i) {
        owned += own.page_transfer_mask[i] ? 1 : 0;
        mapping[i] = owned;
      }
      own.page_indices_mapping = std::move(mapping);
    }
    PDKV_ASSIGN_OR_RETURN(
        own.page_local_indices,
        mask_ordered_local_indices(own.page_transfer_mask, *own.page_indices_mapping,
                                   own.page_local_indices, request.kv_pages.size(),
                                   kv_page_capacity(config_.args)));
    own.page_indices_mapping.reset();  // the local pages are in mask order now
  }
  // Open exactly these pages, rows and slots to the room's prefill ranks (pages past the
  // pool are left out: the prefill's write there fails the room as out of range).
  RoomWrites writes;
  writes.kv_pages = request.kv_pages;
  if (request.ownership) writes.l1_5_local_pages = request.ownership->page_local_indices;
  writes.aux_index = request.aux_index;
  writes.state = StateSlotLists{request.state_slots, request.state_group_ends};
  const uint64_t grant = random_grant_id();
  engine::WriteGrant room_grant = grant_for_room(*grant_buffers_, writes);
  std::shared_ptr<const GrantedDestination> granted;
  if (config_.options.verify_checksum) {
    auto g = granted_destination(room_grant);
    if (!g.ok()) return g.status().with_context("room " + std::to_string(room));
    granted = std::make_shared<const GrantedDestination>(std::move(*g));
  }
  PDKV_RETURN_IF_ERROR(engine_->grant_writes(grant, std::move(room_grant))
                           .with_context("room " + std::to_string(room)));
  Outbox out;
  Status refused;
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(room);
    if (it == rooms_.end()) {
      refused = not_found("room " + std::to_string(room) + " is not open here");
    } else if (it->second.pending) {
      refused = failed_precondition("send_metadata() was already called for room " +
                                    std::to_string(room));
    } else {
      DecodeRoom& r = it->second;
      r.pending = std::move(request);
      r.grant = grant;
      r.granted = std::move(granted);
      if (r.resolved) send_pre_allocations(room, r, out);
    }
  }
  if (!refused.ok()) {
    (void)engine_->revoke_writes(grant);  // nobody was told its id
    return refused;
  }
  flush(out);
  return Status();
}

void DecodeManager::abort_room(uint64_t room, const std::string& reason) {
  fail_room(room, FailureCause::kAbortedLocally, reason.empty() ? "aborted by the decode" : reason,
            true);
}

}  // namespace pdkv::kv
