// The transfer half of PrefillManager: workers turn queued chunks into engine batches.
#include <limits>

#include "common/logging.h"
#include "kv/prefill_manager.h"
#include "kv/transfer_retry.h"
#include "plan/schedule.h"

namespace pdkv::kv {
namespace {

constexpr int64_t kAllLayers = std::numeric_limits<int64_t>::max();

}  // namespace

void PrefillManager::worker_loop(Queue& queue) {
  while (true) {
    Chunk chunk;
    {
      MutexLock lock(queue.mu);
      queue.ready.wait_until(queue.mu, TimePoint::max(), [&]() PDKV_REQUIRES(queue.mu) {
        return stopping_.load() || !queue.chunks.empty();
      });
      if (stopping_) return;
      chunk = std::move(queue.chunks.front());
      queue.chunks.pop_front();
    }
    metrics_.queue_depth_delta(-1);
    process_chunk(chunk);
    MutexLock lock(mu_);
    auto it = rooms_.find(chunk.room);
    if (it != rooms_.end()) --it->second.queued_chunks;
  }
}

void PrefillManager::process_chunk(const Chunk& chunk) {
  std::vector<ChunkDestination> targets;
  bool first_in_room = false;
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(chunk.room);
    if (it == rooms_.end()) return;  // the room ended (failed or aborted) meanwhile
    auto status = board_.get(chunk.room);
    if (!status || status->state == RoomState::kFailed) return;
    Room& r = it->second;
    if (r.transfer_start == TimePoint{}) {
      r.transfer_start = now();
      first_in_room = true;
    }
    for (const auto& [key, dest] : r.destinations) {
      if (dest->is_dummy()) continue;
      auto peer = decodes_.find(key);
      if (peer == decodes_.end()) continue;
      std::shared_ptr<TransferChecksum> checksum;
      if (config_.options.verify_checksum) {
        auto& slot = r.checksums[key];
        if (!slot) slot = std::make_shared<TransferChecksum>();
        checksum = slot;
      }
      targets.push_back(ChunkDestination{chunk.room, key, dest,
                                         peer->second.registration.decode.session_id, checksum});
    }
  }
  if (first_in_room) board_.advance(chunk.room, RoomState::kTransferring);
  uint64_t bytes = 0;
  for (const ChunkDestination& t : targets) {
    if (auto refused = failed_peers_.refused_for(t.engine_endpoint); refused.count() > 0) {
      fail_room(chunk.room, "peer_dead",
                "decode " + t.key + " failed its last transfer after " +
                    std::to_string(config_.options.transfer_attempts) +
                    " attempts; refusing to send to it for another " +
                    std::to_string(refused.count()) + " ms");
      return;
    }
    Status sent = transfer_kv(t, chunk, bytes);
    if (!sent.ok()) {
      if (sent.code() != StatusCode::kAborted) failed_peers_.mark_failed(t.engine_endpoint);
      fail_room(chunk.room, sent.code() == StatusCode::kAborted ? "aborted" : "transfer_failed",
                "failed to send KV of room " + std::to_string(chunk.room) + " to decode " + t.key +
                    ": " + sent.to_string());
      return;
    }
    failed_peers_.record_success(t.engine_endpoint);
  }
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(chunk.room);
    if (it != rooms_.end()) it->second.bytes_written += bytes;
  }
  if (chunk.is_last) finish_success(chunk.room);
}

Status PrefillManager::transfer_kv(const ChunkDestination& target, const Chunk& chunk,
                                   uint64_t& bytes) {
  const DestinationPlan& dest = *target.plan;
  plan::SrcOwnership own;
  const plan::SrcOwnership* src_l15 = nullptr;
  if (config_.enable_mla_l1_5_cache) {
    if (!chunk.ownership) {
      return invalid_argument(
          "the prefill runs the MLA L1.5 cache but the chunk carries no "
          "page ownership (page_transfer_mask / page_local_indices)");
    }
    own.page_transfer_mask = std::span<const uint8_t>(chunk.ownership->page_transfer_mask);
    own.page_local_indices = std::span<const int64_t>(chunk.ownership->page_local_indices);
    src_l15 = &own;
  }
  PDKV_ASSIGN_OR_RETURN(auto pages,
                        dest.resolve(ChunkSpec{chunk.first_page, chunk.pages, src_l15}));
  std::vector<plan::Block> blocks;
  if (!chunk.begin_cache_step) {
    PDKV_RETURN_IF_ERROR(dest.append_kv_blocks(pages, 0, kAllLayers, blocks));
    if (chunk.is_last) {
      PDKV_RETURN_IF_ERROR(
          dest.append_state_blocks(chunk.state_slots, std::nullopt, std::nullopt, blocks));
    }
  } else {
    PDKV_ASSIGN_OR_RETURN(auto groups,
                          plan::layer_groups(config_.args.layer_num(), config_.layerwise_interval,
                                             *chunk.begin_cache_step));
    for (const plan::LayerGroup& g : groups) {
      PDKV_RETURN_IF_ERROR(wait_for_layers(chunk.room, g.wait_for_cache_step + 1));
      blocks.clear();
      PDKV_RETURN_IF_ERROR(dest.append_kv_blocks(pages, g.begin_layer, g.end_layer, blocks));
      if (chunk.is_last) {
        PDKV_RETURN_IF_ERROR(
            dest.append_state_blocks(chunk.state_slots, g.begin_layer, g.end_layer, blocks));
      }
      PDKV_RETURN_IF_ERROR(write_blocks(target, blocks, bytes));
    }
    blocks.clear();
  }
  if (chunk.is_last) {
    std::optional<int64_t> aux;
    {
      MutexLock lock(mu_);
      auto it = rooms_.find(chunk.room);
      if (it != rooms_.end()) aux = it->second.aux_index;
    }
    if (aux) PDKV_RETURN_IF_ERROR(dest.append_aux_blocks(*aux, blocks));
  }
  return write_blocks(target, blocks, bytes);
}

bool PrefillManager::room_ended(uint64_t room) const {
  if (stopping_) return true;
  auto status = board_.get(room);
  return !status || status->state == RoomState::kFailed;
}

Status PrefillManager::wait_for_layers(uint64_t room, int64_t target_step) {
  // The room's waiting deadline bounds this wait; the timer fails the room when it passes.
  if (steps_.wait_ready(target_step, TimePoint::max(), [&] { return room_ended(room); }))
    return Status();
  return aborted("room " + std::to_string(room) + " ended while waiting for its layers");
}

Status PrefillManager::write_blocks(const ChunkDestination& dest, std::vector<plan::Block>& blocks,
                                    uint64_t& bytes) {
  const std::string& engine_endpoint = dest.engine_endpoint;
  if (blocks.empty()) return Status();
  std::vector<engine::WriteBlock> writes;
  writes.reserve(blocks.size());
  uint64_t total = 0;
  for (const plan::Block& b : blocks) {
    writes.push_back(engine::WriteBlock{b.src_addr, b.dst_addr, b.length});
    total += b.length;
  }
  // Summed before sending: the bytes the forward pass wrote, which is what must arrive.
  if (dest.checksum) dest.checksum->add(writes);
  auto attempt = [&](int) -> Status {
    PDKV_ASSIGN_OR_RETURN(engine::SessionId session, session_for(engine_endpoint));
    Status written = engine_->transfer(session, writes);
    // A failed connection is not reused: the next attempt (or room) opens a new one.
    if (!written.ok()) forget_session(engine_endpoint);
    return written;
  };
  TransferRetryPolicy policy;
  policy.max_attempts = config_.options.transfer_attempts;
  Status written = retry_transient(policy, attempt, [&] { return room_ended(dest.room); });
  if (!written.ok()) return written;
  bytes += total;
  metrics_.wrote(total, writes.size());
  return Status();
}

Result<engine::SessionId> PrefillManager::session_for(const std::string& engine_endpoint) {
  {
    MutexLock lock(sessions_mu_);
    auto it = sessions_.find(engine_endpoint);
    if (it != sessions_.end()) return it->second;
  }
  PDKV_ASSIGN_OR_RETURN(engine::SessionId session, engine_->open_session(engine_endpoint));
  MutexLock lock(sessions_mu_);
  auto [it, inserted] = sessions_.try_emplace(engine_endpoint, session);
  if (!inserted) (void)engine_->close_session(session);  // another worker won the race
  return it->second;
}

void PrefillManager::forget_session(const std::string& engine_endpoint) {
  std::optional<engine::SessionId> session;
  {
    MutexLock lock(sessions_mu_);
    auto it = sessions_.find(engine_endpoint);
    if (it == sessions_.end()) return;
    session = it->second;
    sessions_.erase(it);
  }
  (void)engine_->close_session(*session);
}

void PrefillManager::finish_success(uint64_t room) {
  PrefillMetadata meta;
  if (config_.wait_for_prefill_metadata) {
    auto published = metadata_.wait(room, now() + config_.options.metadata_timeout);
    if (!published) {
      fail_room(room, "timeout",
                "the first token of room " + std::to_string(room) + " was not published within " +
                    std::to_string(config_.options.metadata_timeout.count()) + " ms");
      return;
    }
    meta = std::move(*published);
  } else if (auto published = metadata_.peek(room)) {
    meta = std::move(*published);
  }
  std::vector<std::pair<std::string, std::shared_ptr<TransferChecksum>>> notify;
  double latency_ms = 0;
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(room);
    if (it == rooms_.end()) return;
    auto status = board_.get(room);
    if (!status || status->state == RoomState::kFailed) return;
    for (const auto& [key, dest] : it->second.destinations) {
      if (dest->is_dummy()) continue;
      auto sum = it->second.checksums.find(key);
      notify.emplace_back(key, sum == it->second.checksums.end() ? nullptr : sum->second);
    }
    latency_ms =
        std::chrono::duration<double, std::milli>(now() - it->second.transfer_start).count();
    board_.advance(room, RoomState::kSuccess);
    drop_room(room);
  }
  proto::TransferStatus status;
  status.room = room;
  status.state = proto::TransferState::kSuccess;
  status.prefill_engine_rank = identity_.engine_rank;
  status.prefill_attn_tp_rank = identity_.attn_tp_rank;
  status.bootstrap_token = meta.bootstrap_token;
  status.spec_candidate_ids = std::move(meta.spec_candidate_ids);
  for (const auto& [endpoint, checksum] : notify) {
    if (config_.options.verify_checksum) {
      // A destination sent nothing (all its pages owned elsewhere) still gets a checksum:
      // the decode, checking, fails closed on a status without one.
      status.checksum_crc32c = checksum ? checksum->value() : 0;
      status.checksum_ranges = checksum ? checksum->ranges() : std::vector<uint64_t>{};
    }
    send_status(endpoint, status);
  }
  metrics_.room_succeeded(latency_ms);
}

}  // namespace pdkv::kv
