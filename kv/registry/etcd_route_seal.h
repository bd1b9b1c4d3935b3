// Sealed route entries: how a route kept in etcd proves it was written by a member of the
// cluster (docs/SECURITY.md). Anyone who can write to etcd can put any bytes at any key,
// so with a cluster secret the publisher stores each entry as
//
//   {"route": "<the PUT /route JSON of the rank, as a string>",
//    "incarnation": "<16 hex digits>", "started_ms": <int>, "expires_ms": <int>,
//    "mac": "<64 hex digits>"}
//   mac = HMAC_etcd_route("pdkv-etcd-route-v2", etcd key, lease id, route bytes,
//                         incarnation, started_ms, expires_ms)
//
// under the key derived for etcd routes (KeyUse::kEtcdRoute, apart from the bootstrap
// server's). The MAC covers the route's exact bytes (kept as a string, so no JSON
// re-serialisation can change them), the key it was written for (an entry copied to
// another rank's or instance's key fails) and the lease it was put under (a captured
// entry put again without the owner's lease, or after the owner's lease ended, fails:
// a replayed entry cannot outlive its owner's lease).
//
// The lease alone does not bound a replay: any etcd client can keep a crashed rank's
// lease alive (LeaseKeepAlive needs no proof of ownership) and put the old entry under it
// again. So the entry also binds its owner's run and a time limit (SealStamp):
//  - incarnation + started_ms: a random id and the wall-clock start of the publishing
//    process. Readers remember the newest run seen per key and refuse an older one.
//  - expires_ms: the owner re-seals its entries with a fresh expiry while it lives
//    (kSealLifetimeTtls lease TTLs ahead); readers refuse an entry whose expiry passed
//    by more than kSealClockSkew, so a replay under a kept-alive lease dies with it.
//
// Without a secret entries stay the plain route JSON, as before sealing existed, and a
// reader without a secret takes either form unverified (it cannot tell a rewritten route
// from its owner's).
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "bootstrap/registration.h"
#include "common/cluster_key.h"
#include "kv/registry/etcd_client.h"

namespace pdkv::kv {

// How far readers' and owners' wall clocks may disagree: an entry is taken until its
// sealed expiry plus this much. Clocks of a cluster's hosts are assumed NTP-synchronised
// well within it; a larger skew makes entries vanish early (readers ahead) or replays
// live longer by the excess (readers behind).
inline constexpr std::chrono::milliseconds kSealClockSkew{5000};
// An owner seals its entries this many lease TTLs ahead, and seals them again once less
// than two TTLs remain: a crashed owner's entry is refused at most
// kSealLifetimeTtls * TTL + kSealClockSkew after the crash.
inline constexpr int64_t kSealLifetimeTtls = 3;

// The owner's run and the entry's time limit, sealed with the route.
struct SealStamp {
  uint64_t incarnation = 0;  // random per publishing process
  int64_t started_ms = 0;    // the process's start, Unix ms (orders incarnations)
  int64_t expires_ms = 0;    // refused after this (plus kSealClockSkew), Unix ms
  bool operator==(const SealStamp&) const = default;
};

// The wall clock, Unix ms (what SealStamp holds).
int64_t unix_now_ms();

// The value to store at `etcd_key` under `lease`: the envelope above with `key`, else
// `route_json` itself.
std::string seal_route_entry(const ClusterKey* key, std::string_view etcd_key, int64_t lease,
                             std::string_view route_json, const SealStamp& stamp);
// The same for a one-off writer (tools, tests): incarnation 0, started now, expiring in
// kOneOffSealLifetime.
inline constexpr std::chrono::seconds kOneOffSealLifetime{60};
std::string seal_route_entry(const ClusterKey* key, std::string_view etcd_key, int64_t lease,
                             std::string_view route_json);

struct OpenedRouteEntry {
  bootstrap::PrefillRegistration reg;
  SealStamp stamp;  // zero for an entry read without a key
};
// open_route_entry's checks, with the expiry checked against `now_ms`, and the stamp.
Result<OpenedRouteEntry> open_sealed_route_entry(const ClusterKey* key, const EtcdKeyValue& kv,
                                                 int64_t now_ms);

// The registration `kv` holds (parse_registration's checks). With `key`: only a sealed
// entry whose MAC verifies for kv.key and kv.lease; kUnauthenticated, saying which, for
// an unsealed entry or one whose MAC fails (rewritten, moved to another key, or put under
// another lease), or whose sealed expiry passed (kSealClockSkew allowed). Without `key`: the route
// of a sealed entry unverified, or a plain one. kInvalidArgument for a value that is neither.
Result<bootstrap::PrefillRegistration> open_route_entry(const ClusterKey* key,
                                                        const EtcdKeyValue& kv);

}  // namespace pdkv::kv
