// Where the etcd registry keeps routes. One key per prefill rank:
//
//   <prefix>/instances/<instance>/ranks/<engine_rank>  ->  PUT /route JSON of the rank
//
// <prefix> separates clusters sharing one etcd (PDKV_ETCD_PREFIX); <instance> is the
// address the engines already use to name a prefill instance (its bootstrap host:port);
// the value is bootstrap/registration.h's JSON, parsed back with the HTTP server's own
// validating parser, so both registries accept exactly the same registrations.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pdkv::kv {

std::string etcd_instances_prefix(const std::string& prefix);
std::string etcd_instance_prefix(const std::string& prefix, const std::string& instance);
std::string etcd_rank_key(const std::string& prefix, const std::string& instance,
                          int64_t engine_rank);

struct EtcdRankKey {
  std::string instance;
  int64_t engine_rank = 0;
};
// nullopt for a key that is not a rank key under `prefix` (ignored by readers).
std::optional<EtcdRankKey> parse_etcd_rank_key(const std::string& prefix, const std::string& key);

}  // namespace pdkv::kv
