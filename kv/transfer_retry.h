// Retrying a KV write that failed for a transient reason (SPEC §12: the reference failed
// the room on the first error).
//
// A write batch is idempotent: the same source bytes go to the same destination
// addresses, and the decode reads nothing before the room's status arrives, so sending a
// batch again after a connection reset cannot leave wrong bytes behind. Only kUnavailable
// (connect, handshake, reset, peer closed) is retried: a validation error or a rejected
// write would fail the same way again, and a stalled peer (kDeadlineExceeded) has
// already cost a full I/O timeout.
//
// Thread safety: stateless; `op` and `give_up` run on the calling thread.
#pragma once

#include <chrono>
#include <functional>

#include "common/status.h"

namespace pdkv::kv {

struct TransferRetryPolicy {
  int max_attempts = 3;                         // 1 = no retry
  std::chrono::milliseconds first_backoff{50};  // doubled before each further attempt
};

bool is_transient_transfer_error(const Status& status);

// Runs op(attempt) (attempt counts from 0) until it succeeds, fails for a reason that is
// not transient, the attempts are spent, or give_up() is true before a retry (the room
// ended, the manager stops). Returns the last result.
Status retry_transient(const TransferRetryPolicy& policy, const std::function<Status(int)>& op,
                       const std::function<bool()>& give_up);

}  // namespace pdkv::kv
