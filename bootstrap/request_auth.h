// Authentication of bootstrap HTTP requests with the cluster secret (docs/SECURITY.md).
//
// A member signs a request by adding one header:
//   X-Pdkv-Auth: v1 <unix_ms> <nonce: 32 hex> <mac: 64 hex>
//   mac = HMAC_bootstrap("pdkv-bootstrap-v1", method, target, unix_ms, nonce, body)
// where `target` is the request's path with its query, exactly as sent. The server accepts
// it only if the MAC verifies, the time lies within kMaxClockSkew of its own clock, and the
// nonce was not used before within that window (so a captured request cannot be replayed,
// not even to re-register a route that was since deleted). Anything else is 401 with a
// reason that says nothing about the cluster.
//
// Thread safety: sign_request is pure; RequestVerifier is internally synchronised.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/cluster_key.h"
#include "common/mutex.h"
#include "common/status.h"

namespace pdkv::bootstrap {

inline constexpr const char* kAuthHeader = "X-Pdkv-Auth";
inline constexpr std::chrono::milliseconds kMaxClockSkew{30000};

// The header value for one request, signed at `unix_ms` (wall clock) with a fresh nonce.
std::string sign_request(const ClusterKey& key, std::string_view method, std::string_view target,
                         std::string_view body, int64_t unix_ms);
int64_t unix_now_ms();

class RequestVerifier {
 public:
  // Nonces remembered at most (each for 2 x kMaxClockSkew); past it the oldest go first.
  // Only requests whose MAC verified are remembered, so strangers cannot fill it.
  explicit RequestVerifier(size_t max_nonces = 1 << 16) : max_nonces_(max_nonces) {}

  // OK, or kUnauthenticated with the reason (missing, malformed, stale, replayed, bad MAC).
  Status verify(const ClusterKey& key, std::string_view header, std::string_view method,
                std::string_view target, std::string_view body, int64_t now_unix_ms)
      PDKV_EXCLUDES(mu_);

 private:
  // Drops the nonce that expires first. REQUIRES: by_expiry_ not empty.
  void forget_oldest() PDKV_REQUIRES(mu_);

  const size_t max_nonces_;
  Mutex mu_;
  std::unordered_map<std::string, int64_t> seen_ PDKV_GUARDED_BY(mu_);  // nonce -> expiry
  std::multimap<int64_t, std::string> by_expiry_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::bootstrap
