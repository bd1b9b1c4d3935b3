#include "kv/registry/registry_options.h"

#include "common/config.h"
#include "kv/registry/etcd_route_directory.h"
#include "kv/registry/registry_settings.h"
#include "kv/route/bootstrap_route_directory.h"

namespace pdkv::kv {

Result<RegistryOptions> RegistryOptions::from(const config::Settings& settings) {
  RegistryOptions o;
  PDKV_ASSIGN_OR_RETURN(std::string kind, config::read<kRegistry>(settings));
  PDKV_ASSIGN_OR_RETURN(o.etcd_endpoints, config::read<kEtcdEndpoints>(settings));
  PDKV_ASSIGN_OR_RETURN(o.etcd_prefix, config::read<kEtcdPrefix>(settings));
  PDKV_ASSIGN_OR_RETURN(o.etcd_lease_ttl_s, config::read<kEtcdLeaseTtlS>(settings));
  PDKV_ASSIGN_OR_RETURN(o.etcd_ca_file, config::read<kEtcdCaFile>(settings));
  PDKV_ASSIGN_OR_RETURN(o.etcd_cert_file, config::read<kEtcdCertFile>(settings));
  PDKV_ASSIGN_OR_RETURN(o.etcd_key_file, config::read<kEtcdKeyFile>(settings));
  PDKV_ASSIGN_OR_RETURN(o.etcd_user, config::read<kEtcdUser>(settings));
  PDKV_ASSIGN_OR_RETURN(o.etcd_password_file, config::read<kEtcdPasswordFile>(settings));
  o.kind = kind == "etcd" ? RegistryKind::kEtcd : RegistryKind::kHttp;
  if (o.etcd_prefix.empty() || o.etcd_prefix.front() != '/' || o.etcd_prefix.back() == '/' ||
      o.etcd_prefix.size() > 256) {
    return invalid_argument(std::string(kEtcdPrefix.name) + "='" + o.etcd_prefix +
                            "': must start with '/', not end with '/', at most 256 bytes");
  }
  return o;
}

Result<std::shared_ptr<RouteDirectory>> make_route_directory(
    const RegistryOptions& options, std::shared_ptr<const ClusterKey> cluster_key) {
  if (options.kind == RegistryKind::kHttp) {
    return std::shared_ptr<RouteDirectory>(
        std::make_shared<BootstrapRouteDirectory>(std::move(cluster_key)));
  }
  PDKV_ASSIGN_OR_RETURN(auto etcd, EtcdRouteDirectory::create(options, std::move(cluster_key)));
  return std::shared_ptr<RouteDirectory>(std::move(etcd));
}

}  // namespace pdkv::kv
