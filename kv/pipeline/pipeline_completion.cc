// TransferPipeline's completions: sessions opened, batches acknowledged (rooms finished
// when every planned byte is), batches failed (retried, split per room, or the link given
// up and the peer's breaker opened).
#include <algorithm>
#include <utility>

#include "engine/device/device_health.h"
#include "kv/pipeline/transfer_pipeline.h"
#include "kv/pipeline/transfer_retry.h"

namespace pdkv::kv {

namespace {

// Errors that say something about the blocks, not the connection: the session stays.
bool about_the_blocks(const Status& s) {
  const BatchFailure f = classify_batch_failure(s);
  return f == BatchFailure::kRefused || f == BatchFailure::kUnmovable;
}

// Why a batch that failed for good fails its rooms. A refusal is the decode refusing a
// destination (outside its registered memory); blocks that could not be moved (a failed
// device copy) are no fault of their addresses; Aborted is our own close of a connection
// that kept breaking, so it is the link too.
FailureCause cause_of_batch_failure(const Status& s) {
  switch (classify_batch_failure(s)) {
    case BatchFailure::kRefused: return FailureCause::kOutOfRange;
    case BatchFailure::kUnmovable: return FailureCause::kInternal;
    case BatchFailure::kClosedHere: return FailureCause::kLinkLost;
    case BatchFailure::kPeerLost: break;
  }
  return is_transient_transfer_error(s) ? FailureCause::kLinkLost : FailureCause::kInternal;
}

}  // namespace

void TransferPipeline::on_opened(Opened& opened) {
  PeerLink& link = link_for(opened.endpoint);
  link.opening = false;
  if (opened.session.ok()) {
    if (link.session) {
      connector_->close(*opened.session);  // a second open raced the first
    } else {
      link.session = *opened.session;
      link.connect_failures = 0;
    }
    return;
  }
  if (!link.has_work()) return;  // an early open (prepare_peer): the first batch retries
  ++link.connect_failures;
  if (link.connect_failures >= options_.transfer_attempts) {
    link.connect_failures = 0;
    failed_peers_.mark_failed(link.endpoint(), link.opening_since);
    give_up_link(link, opened.session.status());
    return;
  }
  link.reconnect_at = now() + retry_backoff(options_.first_backoff, link.connect_failures);
}

void TransferPipeline::on_completion(Completion& completion) {
  auto it = inflight_.find(completion.batch_id);
  if (it == inflight_.end()) return;
  WriteBatch batch = std::move(it->second);
  inflight_.erase(it);
  PeerLink& link = link_for(batch.endpoint);
  link.inflight_bytes -= batch.bytes;
  if (!completion.status.ok()) {
    handle_batch_failure(link, std::move(batch), completion.status);
    return;
  }
  failed_peers_.record_success(batch.endpoint);
  metrics_.wrote(batch.bytes, batch.blocks.size());
  acknowledge(batch, batch.noted);
}

void TransferPipeline::acknowledge(const WriteBatch& batch, const std::vector<RoomKey>& noted) {
  const TimePoint acked = now();
  for (const RoomKey& key : noted) {
    // Its status rode this batch (or an earlier attempt), and the decode handled it.
    RoomTransfer* r = find_room(key);
    const size_t d = r != nullptr ? dest_index(*r, batch.endpoint) : 0;
    if (r == nullptr || d >= r->destinations.size()) continue;
    const std::string& dest = r->destinations[d].key;
    if (std::find(r->delivered.begin(), r->delivered.end(), dest) == r->delivered.end()) {
      r->delivered.push_back(dest);
    }
  }
  for (const BatchSegment& seg : batch.segments) {
    RoomTransfer* r = find_room(seg.key);
    if (r == nullptr) continue;
    // A link carries only the pieces of destinations behind its endpoint.
    r->dest_outstanding[dest_index(*r, batch.endpoint)] -= seg.bytes;
    r->first_submit = std::min(r->first_submit, batch.submitted_at);
    r->last_ack = acked;
    maybe_finished(seg.key.room, *r);
  }
}

void TransferPipeline::handle_batch_failure(PeerLink& link, WriteBatch batch,
                                            const Status& status) {
  if (!about_the_blocks(status) && link.session && *link.session == batch.session) {
    // The connection broke: nothing more goes on this session. Closing it aborts the
    // batches still on it, which come back here and are retried like this one.
    connector_->close(*link.session);
    link.session.reset();
  }
  // Aborted comes from our own close (above, or a reset peer): the batch did nothing wrong.
  const bool retryable =
      is_transient_transfer_error(status) || status.code() == StatusCode::kAborted;
  if (retryable && batch.attempt + 1 < options_.transfer_attempts) {
    ++batch.attempt;
    batch.not_before = now() + retry_backoff(options_.first_backoff, batch.attempt);
    link.requeue(std::move(batch));
    return;
  }
  auto rooms_of = [&] {
    std::vector<RoomKey> keys;
    for (const BatchSegment& s : batch.segments) {
      if (std::find(keys.begin(), keys.end(), s.key) == keys.end()) keys.push_back(s.key);
    }
    return keys;
  };
  std::vector<RoomKey> keys = rooms_of();
  if (status.code() == StatusCode::kAlreadyCompleted && keys.size() == 1) {
    // The decode says this room already succeeded: a retry of a batch whose first
    // attempt landed, status and all, and whose acknowledgement was lost. Believed only
    // when the room's status rode an earlier submission to that decode (a refused part
    // delivers no note, so this one's cannot count); else the decode is wrong about our
    // room and it fails below like any refusal.
    RoomTransfer* r = find_room(keys.front());
    const size_t d = r != nullptr ? dest_index(*r, batch.endpoint) : 0;
    if (r != nullptr && d < r->status_sent_at.size() && r->status_sent_at[d] < batch.submitted_at) {
      failed_peers_.record_success(batch.endpoint);
      acknowledge(batch, keys);
      return;
    }
  }
  if (classify_batch_failure(status) == BatchFailure::kRefused && !batch.single_room &&
      keys.size() > 1) {
    // The decode refused a block: send each room alone, so only the guilty one fails.
    for (const RoomKey& k : keys) {
      WriteBatch one = select_segments(batch, [&](const RoomKey& key) { return key == k; });
      one.single_room = true;
      one.not_before = TimePoint{};
      link.requeue(std::move(one));
    }
    return;
  }
  // Only the peer's absence opens its breaker. A refusal came in a proper acknowledgement
  // from a live peer and is about these blocks: it fails their rooms (below) and no other.
  // Counted against the endpoint, one room the decode cancelled mid-transfer would fail
  // every other room pending to it for the cooldown, and a registration naming another
  // decode's engine endpoint could do that to it at will.
  // After a context-fatal device error (engine/device/device_health.h) a rank holding
  // device memory fails its batches for that reason, whatever the call that met it was
  // (a connection its broken staging closed included): not the decode's fault, so its
  // breaker stays closed.
  const Status fault = engine_.device_regions().empty() ? Status() : engine::device_fault();
  const bool device_dead = !fault.ok() && classify_batch_failure(status) != BatchFailure::kRefused;
  if (!device_dead && classify_batch_failure(status) == BatchFailure::kPeerLost) {
    failed_peers_.mark_failed(batch.endpoint, batch.submitted_at);
  }
  const FailureCause cause =
      device_dead ? FailureCause::kDeviceFault : cause_of_batch_failure(status);
  const std::string why = device_dead
                              ? "this process's device path failed for good: " + fault.message() +
                                    " (the batch: " + status.to_string() + ")"
                              : status.to_string();
  for (const RoomKey& k : keys) {
    const RoomTransfer* r = find_room(k);
    if (r == nullptr) continue;
    fail(k.room, cause,
         "failed to send KV of room " + std::to_string(k.room) + " to decode " +
             decode_name(*r, batch.endpoint) + ": " + why);
  }
}

void TransferPipeline::give_up_link(PeerLink& link, const Status& why) {
  for (const RoomKey& k : link.take_all_rooms()) {
    const RoomTransfer* r = find_room(k);
    if (r == nullptr) continue;
    fail(k.room, FailureCause::kLinkLost,
         "cannot send KV of room " + std::to_string(k.room) + " to decode " +
             decode_name(*r, link.endpoint()) + ": " + why.to_string());
  }
}

}  // namespace pdkv::kv
