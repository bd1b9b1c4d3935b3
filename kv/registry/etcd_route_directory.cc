#include "kv/registry/etcd_route_directory.h"

#include "kv/route/bootstrap_route_directory.h"

namespace pdkv::kv {

Result<std::shared_ptr<EtcdRouteDirectory>> EtcdRouteDirectory::create(
    const RegistryOptions& options, std::shared_ptr<const ClusterKey> key) {
  PDKV_ASSIGN_OR_RETURN(EtcdAccess access, etcd_access_from(options));
  PDKV_ASSIGN_OR_RETURN(auto client, EtcdClient::create(options.etcd_endpoints, std::move(access)));
  return std::shared_ptr<EtcdRouteDirectory>(
      new EtcdRouteDirectory(std::move(client), options, std::move(key)));
}

EtcdRouteDirectory::EtcdRouteDirectory(std::shared_ptr<EtcdClient> client, RegistryOptions options,
                                       std::shared_ptr<const ClusterKey> key)
    : client_(std::move(client)), options_(std::move(options)), key_(std::move(key)) {}

namespace {
// Instance names become part of etcd keys: keep them to what a bootstrap address holds.
Status check_instance(const std::string& instance) {
  if (instance.empty() || instance.size() > 255)
    return invalid_argument("instance name (bootstrap address) must be 1-255 bytes");
  for (unsigned char c : instance) {
    if (c == '/' || c < 0x21 || c > 0x7e)
      return invalid_argument("instance name '" + instance +
                              "' may hold only printable ASCII without '/' or spaces");
  }
  return Status();
}
}  // namespace

EtcdRankPublisher& EtcdRouteDirectory::publisher() {
  MutexLock lock(mu_);
  if (!publisher_)
    publisher_ = std::make_unique<EtcdRankPublisher>(client_, options_.etcd_prefix,
                                                     options_.etcd_lease_ttl_s, key_);
  return *publisher_;
}

EtcdRouteWatcher& EtcdRouteDirectory::watcher() {
  MutexLock lock(mu_);
  if (!watcher_) watcher_ = std::make_unique<EtcdRouteWatcher>(client_, options_.etcd_prefix, key_);
  return *watcher_;
}

Status EtcdRouteDirectory::register_prefill_rank(const std::string& instance,
                                                 const PrefillRankInfo& info, TimePoint deadline) {
  PDKV_RETURN_IF_ERROR(check_instance(instance));
  PDKV_ASSIGN_OR_RETURN(bootstrap::PrefillRegistration reg, to_registration(info));
  return publisher().publish(instance, reg, deadline);
}

Status EtcdRouteDirectory::unregister_prefill_rank(const std::string& instance,
                                                   const PrefillRankInfo& info,
                                                   TimePoint deadline) {
  return publisher().withdraw(instance, info.engine_rank, deadline);
}

Result<PrefillRankInfo> EtcdRouteDirectory::lookup_instance(const std::string& instance,
                                                            TimePoint deadline,
                                                            const Interrupt* interrupt) {
  PDKV_RETURN_IF_ERROR(check_instance(instance));
  PDKV_ASSIGN_OR_RETURN(bootstrap::InstanceLayout layout,
                        watcher().wait_for_instance(instance, deadline, interrupt));
  return rank_info_from_layout(layout);
}

std::unique_ptr<RouteSubscription> EtcdRouteDirectory::subscribe(RouteListener listener) {
  return watcher().subscribe(std::move(listener));
}

Result<PrefillRankInfo> EtcdRouteDirectory::lookup_prefill_rank(const std::string& instance,
                                                                int64_t dp_group, int64_t tp_rank,
                                                                TimePoint deadline,
                                                                const Interrupt* interrupt) {
  PDKV_RETURN_IF_ERROR(check_instance(instance));
  PDKV_ASSIGN_OR_RETURN(bootstrap::PrefillRegistration reg,
                        watcher().wait_for_rank(instance, dp_group, tp_rank, deadline, interrupt));
  PrefillRankInfo info = rank_info_from_layout(reg.layout);
  info.engine_rank = reg.engine_rank;
  info.control_endpoint = make_tcp_endpoint(reg.rank_ip, reg.rank_port);
  return info;
}

}  // namespace pdkv::kv
