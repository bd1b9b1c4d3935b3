#include "kv/pipeline/transfer_retry.h"

#include <algorithm>

namespace pdkv::kv {

bool is_transient_transfer_error(const Status& status) {
  return status.code() == StatusCode::kUnavailable;
}

BatchFailure classify_batch_failure(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOutOfRange:
    case StatusCode::kAlreadyCompleted:
    case StatusCode::kInvalidArgument: return BatchFailure::kRefused;
    case StatusCode::kFailedPrecondition: return BatchFailure::kUnmovable;
    case StatusCode::kAborted: return BatchFailure::kClosedHere;
    default: return BatchFailure::kPeerLost;
  }
}

std::chrono::milliseconds retry_backoff(std::chrono::milliseconds first, int retry) {
  const int doublings = std::clamp(retry - 1, 0, 10);
  return first * (int64_t{1} << doublings);
}

}  // namespace pdkv::kv
