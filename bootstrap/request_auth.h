// Authentication of bootstrap HTTP requests with the cluster secret (docs/SECURITY.md).
//
// Every server process draws a random **server id** when it starts and names it in the
// X-Pdkv-Server header of GET /health (always open) and of every 401. A member signs a
// request for that one server instance by adding one header:
//   X-Pdkv-Auth: v2 <unix_ms> <nonce: 32 hex> <server id: 32 hex> <mac: 64 hex>
//   mac = HMAC_bootstrap("pdkv-bootstrap-v2", server id, method, target, unix_ms, nonce,
//                        body)
// where `target` is the request's path with its query, exactly as sent, and the nonce and
// server id enter the MAC as bytes. The server accepts it only if it names this server's
// id, the MAC verifies, the time lies within kMaxClockSkew of its own clock, and the
// nonce's bytes (never their spelling: hex of either case decodes to the same nonce) were
// not used before within that window. So a captured request cannot be replayed: not at
// this server (not even to re-register a route that was since deleted), not at another
// server of the cluster (another id), and not at this one after a restart, which forgets
// its nonces but also draws a new id. Anything else is 401 with a reason that says
// nothing about the cluster. A client learns the id from /health and learns it again when
// a 401 names another one (the server restarted).
//
// Thread safety: sign_request is pure; RequestVerifier is internally synchronised.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/cluster_key.h"
#include "common/mutex.h"
#include "common/status.h"

namespace pdkv::bootstrap {

inline constexpr const char* kAuthHeader = "X-Pdkv-Auth";
inline constexpr const char* kServerIdHeader = "X-Pdkv-Server";
inline constexpr std::chrono::milliseconds kMaxClockSkew{30000};

// One bootstrap server process, as the signatures made for it name it.
using ServerId = std::array<uint8_t, 16>;
ServerId random_server_id();
std::string server_id_text(const ServerId& id);  // 32 lower-case hex digits
// The id in `text` (32 hex digits, either case), or nullopt.
std::optional<ServerId> parse_server_id(std::string_view text);

// The header value for one request to the server `server`, signed at `unix_ms` (wall
// clock) with a fresh nonce.
std::string sign_request(const ClusterKey& key, const ServerId& server, std::string_view method,
                         std::string_view target, std::string_view body, int64_t unix_ms);
int64_t unix_now_ms();

class RequestVerifier {
 public:
  // Verifies requests signed for `server` (this server's id). Nonces remembered at most
  // (each for 2 x kMaxClockSkew); past it the oldest go first. Only requests whose MAC
  // verified are remembered, so strangers cannot fill it.
  explicit RequestVerifier(const ServerId& server, size_t max_nonces = 1 << 16)
      : server_(server), max_nonces_(max_nonces) {}

  const ServerId& server() const { return server_; }

  // OK, or kUnauthenticated with the reason (missing, malformed, stale, replayed, bad MAC).
  Status verify(const ClusterKey& key, std::string_view header, std::string_view method,
                std::string_view target, std::string_view body, int64_t now_unix_ms)
      PDKV_EXCLUDES(mu_);

 private:
  // Drops the nonce that expires first. REQUIRES: by_expiry_ not empty.
  void forget_oldest() PDKV_REQUIRES(mu_);

  const ServerId server_;
  const size_t max_nonces_;
  Mutex mu_;
  // Keyed on the nonce's bytes: its hex spelling is not covered by the MAC.
  std::unordered_map<std::string, int64_t> seen_ PDKV_GUARDED_BY(mu_);  // nonce -> expiry
  std::multimap<int64_t, std::string> by_expiry_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::bootstrap
