// Sealed route entries: how a route kept in etcd proves it was written by a member of the
// cluster (docs/SECURITY.md). Anyone who can write to etcd can put any bytes at any key,
// so with a cluster secret the publisher stores each entry as
//
//   {"route": "<the PUT /route JSON of the rank, as a string>", "mac": "<64 hex digits>"}
//   mac = HMAC_etcd_route("pdkv-etcd-route-v1", etcd key, lease id, route bytes)
//
// under the key derived for etcd routes (KeyUse::kEtcdRoute, apart from the bootstrap
// server's). The MAC covers the route's exact bytes (kept as a string, so no JSON
// re-serialisation can change them), the key it was written for (an entry copied to
// another rank's or instance's key fails) and the lease it was put under (a captured
// entry put again without the owner's lease, or after the owner's lease ended, fails:
// a replayed entry cannot outlive its owner).
//
// Without a secret entries stay the plain route JSON, as before sealing existed, and a
// reader without a secret takes either form unverified (it cannot tell a rewritten route
// from its owner's).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "bootstrap/registration.h"
#include "common/cluster_key.h"
#include "kv/registry/etcd_client.h"

namespace pdkv::kv {

// The value to store at `etcd_key` under `lease`: the envelope above with `key`, else
// `route_json` itself.
std::string seal_route_entry(const ClusterKey* key, std::string_view etcd_key, int64_t lease,
                             std::string_view route_json);

// The registration `kv` holds (parse_registration's checks). With `key`: only a sealed
// entry whose MAC verifies for kv.key and kv.lease; kUnauthenticated, saying which, for
// an unsealed entry or one whose MAC fails (rewritten, moved to another key, or put under
// another lease). Without `key`: the route of a sealed entry unverified, or a plain one.
// kInvalidArgument for a value that is neither.
Result<bootstrap::PrefillRegistration> open_route_entry(const ClusterKey* key,
                                                        const EtcdKeyValue& kv);

}  // namespace pdkv::kv
