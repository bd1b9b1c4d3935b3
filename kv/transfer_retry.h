// Which KV write failures are retried, and how long to wait before each retry (SPEC §12:
// the reference failed the room on the first error). The retry loop itself is the
// transfer pipeline's (kv/transfer_pipeline.h): a failed batch goes back on its link with
// a backoff, nothing sleeps.
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

#include "common/status.h"

namespace pdkv::kv {

bool is_transient_transfer_error(const Status& status);

// The wait before retry number `retry` (1 = the first): first, then doubling, capped at
// 2^10 x first.
std::chrono::milliseconds retry_backoff(std::chrono::milliseconds first, int retry);

}  // namespace pdkv::kv
