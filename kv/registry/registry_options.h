// RegistryOptions: which route registry the KV managers use (PDKV_REGISTRY) and how
// they reach etcd, read once from PDKV_* variables (docs/CONFIG.md). Kept apart from
// KvManagerOptions so that the registry can be chosen without touching the managers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/cluster_key.h"
#include "common/config.h"
#include "common/status.h"
#include "kv/registry/etcd_access.h"
#include "kv/route/route_directory.h"

namespace pdkv::kv {

enum class RegistryKind { kHttp, kEtcd };

struct RegistryOptions {
  RegistryKind kind = RegistryKind::kHttp;
  std::string etcd_endpoints = "127.0.0.1:2379";  // host:port,...
  std::string etcd_prefix = "/pdkv";              // starts with '/', no trailing '/'
  int64_t etcd_lease_ttl_s = 10;
  // etcd's own access control (etcd_access.h): TLS files, and a user with its password
  // in a file. Empty: none.
  std::string etcd_ca_file;
  std::string etcd_cert_file;
  std::string etcd_key_file;
  std::string etcd_user;
  std::string etcd_password_file;

  // PDKV_REGISTRY, PDKV_ETCD_ENDPOINTS, PDKV_ETCD_PREFIX, PDKV_ETCD_LEASE_TTL_S and the
  // access settings (PDKV_ETCD_CA_FILE, _CERT_FILE, _KEY_FILE, _USER, _PASSWORD_FILE): each from
  // `settings` if set there (pdkv.Config), else the environment, else the default.
  static Result<RegistryOptions> from(const config::Settings& settings);
  static Result<RegistryOptions> from_env() { return from(config::Settings()); }
};

// The etcd access these options ask for (etcd_access.h), its password read.
inline Result<EtcdAccess> etcd_access_from(const RegistryOptions& o) {
  return etcd_access_from(EtcdAccessSettings{o.etcd_ca_file, o.etcd_cert_file, o.etcd_key_file,
                                             o.etcd_user, o.etcd_password_file});
}

// The RouteDirectory the options select: the HTTP bootstrap client, or etcd
// (kv/registry/etcd_route_directory.h). kInvalidArgument for bad endpoints or prefix.
// `cluster_key` signs the HTTP registry's requests (bootstrap/request_auth.h) and the etcd
// registry's entries (kv/registry/etcd_route_seal.h; docs/SECURITY.md).
Result<std::shared_ptr<RouteDirectory>> make_route_directory(
    const RegistryOptions& options, std::shared_ptr<const ClusterKey> cluster_key = nullptr);

}  // namespace pdkv::kv
