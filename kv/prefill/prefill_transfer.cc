// The completion half of PrefillManager: the pipeline reports rooms whose bytes all
// landed; their Success statuses go out (after the first token, if the engine waits for
// it), in one send burst per decode rank.
#include <algorithm>

#include "common/logging.h"
#include "kv/prefill/prefill_manager.h"
#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

void PrefillManager::on_rooms_transferred(const std::vector<TransferredRoom>& rooms) {
  Outbox out;
  const TimePoint at = now();
  {
    MutexLock lock(mu_);
    for (const TransferredRoom& done : rooms) {
      auto it = rooms_.find(done.room);
      if (it == rooms_.end()) continue;  // ended meanwhile (failed, aborted)
      PrefillRoom& r = it->second;
      r.transferred_at = at;
      std::optional<PrefillMetadata> meta = metadata_.peek(done.room);
      // A note is built only with the metadata in (or not waited for), so a room that
      // still waits for it delivered none.
      if (done.delivered_to.empty() && !meta && config_.wait_for_prefill_metadata) {
        // An event, not a wait: set_prefill_metadata() completes it, the timer expires it.
        r.metadata_deadline = now() + config_.options.metadata_timeout;
        awaiting_metadata_.insert(done.room);
        continue;
      }
      complete_room(done.room, r, meta.value_or(PrefillMetadata{}), done.delivered_to, out);
    }
  }
  flush(out);
}

std::optional<proto::TransferStatus> PrefillManager::success_for_note(uint64_t room,
                                                                      const std::string& key) {
  MutexLock lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return std::nullopt;
  const PrefillRoom& r = it->second;
  std::optional<PrefillMetadata> meta = metadata_.peek(room);
  if (!meta && config_.wait_for_prefill_metadata) return std::nullopt;
  auto dest = r.destinations.find(key);
  if (dest == r.destinations.end() || dest->second->is_dummy()) return std::nullopt;
  return success_status(room, r, key, *dest->second, meta.value_or(PrefillMetadata{}));
}

proto::TransferStatus PrefillManager::success_status(uint64_t room, const PrefillRoom& r,
                                                     const std::string& key,
                                                     const DestinationPlan& dest,
                                                     const PrefillMetadata& meta) const {
  proto::TransferStatus success = status_of(room, proto::TransferState::kSuccess);
  success.bootstrap_token = meta.bootstrap_token;
  success.spec_candidate_ids = meta.spec_candidate_ids;
  if (config_.options.verify_checksum) {
    // A destination sent nothing (all its pages owned elsewhere) still gets a checksum:
    // the decode, checking, fails closed on a status without one.
    auto sum = r.checksums.find(key);
    const bool has = sum != r.checksums.end() && sum->second;
    success.checksum_crc32c = has ? sum->second->value() : 0;
    success.checksum_ranges = has ? sum->second->ranges() : std::vector<uint64_t>{};
  }
  success.ticket = dest.pre_allocation().ticket;
  return success;
}

void PrefillManager::complete_room(uint64_t room, PrefillRoom& r, const PrefillMetadata& meta,
                                   const std::vector<std::string>& delivered, Outbox& out) {
  const std::optional<RoomState> state = board_.state(room);
  if (!state || *state == RoomState::kFailed) return;
  for (const auto& [key, dest] : r.destinations) {
    if (dest->is_dummy() || std::find(delivered.begin(), delivered.end(), key) != delivered.end()) {
      continue;
    }
    out.add(key, success_status(room, r, key, *dest, meta));
  }
  const TimePoint done = now();
  metrics_.observe(RoomStage::kStatusDelivery, done - r.transferred_at);
  metrics_.observe(RoomStage::kEndToEnd, done - r.last_chunk_at);
  board_.advance(room, RoomState::kSuccess);
  drop_room(room);  // r is gone from here on
  metrics_.room_succeeded();
}

void PrefillManager::expire_metadata_waits() {
  std::vector<uint64_t> expired;
  {
    MutexLock lock(mu_);
    for (uint64_t room : awaiting_metadata_) {
      auto it = rooms_.find(room);
      if (it != rooms_.end() && now() >= it->second.metadata_deadline) expired.push_back(room);
    }
  }
  for (uint64_t room : expired) {
    fail_room(room, FailureCause::kMetadataTimeout,
              "the first token of room " + std::to_string(room) + " was not published within " +
                  std::to_string(config_.options.metadata_timeout.count()) + " ms",
              FailureStage::kCompletion);
  }
}

}  // namespace pdkv::kv
