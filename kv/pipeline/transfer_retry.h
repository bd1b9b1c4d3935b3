// Which KV write failures are retried, what a failure says about the peer, and how long
// to wait before each retry (a KV transfer that failed the room on its first error loses rooms a
// retry would save). The retry loop itself is the transfer pipeline's
// (kv/pipeline/transfer_pipeline.h): a failed batch goes back on its link with a backoff, nothing
// sleeps.
//
// A write batch is idempotent: the same source bytes go to the same destination
// addresses, and the decode reads nothing before the room's status arrives, so sending a
// batch again after a connection reset cannot leave wrong bytes behind. Only kUnavailable
// (connect, handshake, reset, peer closed) is transient: a validation error or a rejected
// write would fail the same way again, and a stalled peer (kDeadlineExceeded) has
// already cost a full I/O timeout.
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <cstdint>

#include "common/status.h"

namespace pdkv::kv {

bool is_transient_transfer_error(const Status& status);

// What a write batch that failed says about its peer. Only kPeerLost may open the peer's
// circuit breaker (FailedPeerTracker): a refusal is the peer's answer about these blocks
// (a decode that revoked a room's grant refuses the rest of that room's bytes, and a
// registration may name anyone's engine endpoint), so counting it against the endpoint
// would fail the peer's other rooms for a cooldown, or let a stranger do so at will.
enum class BatchFailure : uint8_t {
  // About the blocks, not the connection: the peer acknowledged the part and refused it
  // (OutOfRange, AlreadyCompleted), or the engine refused to submit it as malformed
  // (InvalidArgument). The session stays; only the rooms of the refused blocks fail.
  kRefused,
  // About the blocks too, but no fault of their addresses: a side could not submit, read
  // or land them (FailedPrecondition: a device copy failed, no device driver, a backend
  // without batch notes). The session stays; the batch's rooms fail together, as no one
  // room among them is to blame.
  kUnmovable,
  // Our own close of the session (Aborted): the batch did nothing wrong.
  kClosedHere,
  // The link or the peer is gone: connect or handshake failure, reset, peer closed,
  // silence past the I/O timeout, a garbled stream, anything else.
  kPeerLost,
};
BatchFailure classify_batch_failure(const Status& status);

// The wait before retry number `retry` (1 = the first): first, then doubling, capped at
// 2^10 x first.
std::chrono::milliseconds retry_backoff(std::chrono::milliseconds first, int retry);

}  // namespace pdkv::kv
