#include "kv/transfer_retry.h"

#include <thread>

namespace pdkv::kv {

bool is_transient_transfer_error(const Status& status) {
  return status.code() == StatusCode::kUnavailable;
}

Status retry_transient(const TransferRetryPolicy& policy, const std::function<Status(int)>& op,
                       const std::function<bool()>& give_up) {
  auto backoff = policy.first_backoff;
  for (int attempt = 0;; ++attempt) {
    Status result = op(attempt);
    if (result.ok() || !is_transient_transfer_error(result) || attempt + 1 >= policy.max_attempts ||
        give_up()) {
      return result;
    }
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
    if (give_up()) return result;
  }
}

}  // namespace pdkv::kv
