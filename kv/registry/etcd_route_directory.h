// EtcdRouteDirectory: the RouteDirectory kept in etcd (PDKV_REGISTRY=etcd), so routes
// outlive any one host: prefill ranks publish under a lease (etcd_rank_publisher.h),
// decodes read a watched mirror of the prefix (etcd_route_watcher.h). The managers
// cannot tell it from the HTTP bootstrap directory; `bootstrap_addr` names the prefill
// instance (its key in etcd: 1-255 printable ASCII bytes without '/', else
// kInvalidArgument) and need not run a server.
//
// With a cluster secret (`key`) the ranks seal their entries and the watcher takes only
// sealed ones that verify (etcd_route_seal.h); without one, anyone who can write under the
// prefix can re-point a route, and only etcd's access control stands in the way.
//
// The publisher and the watcher start on first use (a decode subscribes at creation), so
// a prefill rank never watches and a decode never holds a lease. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "common/mutex.h"
#include "kv/registry/etcd_client.h"
#include "kv/registry/etcd_rank_publisher.h"
#include "kv/registry/etcd_route_watcher.h"
#include "kv/registry/registry_options.h"
#include "kv/route/route_directory.h"

namespace pdkv::kv {

class EtcdRouteDirectory : public RouteDirectory {
 public:
  static Result<std::shared_ptr<EtcdRouteDirectory>> create(
      const RegistryOptions& options, std::shared_ptr<const ClusterKey> key = nullptr);

  Status register_prefill_rank(const std::string& instance, const PrefillRankInfo& info,
                               TimePoint deadline) override;
  Status unregister_prefill_rank(const std::string& instance, const PrefillRankInfo& info,
                                 TimePoint deadline) override;
  Result<PrefillRankInfo> lookup_instance(const std::string& instance, TimePoint deadline,
                                          const Interrupt* interrupt = nullptr) override;
  Result<PrefillRankInfo> lookup_prefill_rank(const std::string& instance, int64_t dp_group,
                                              int64_t tp_rank, TimePoint deadline,
                                              const Interrupt* interrupt = nullptr) override;
  // The watcher's route changes (started if needed): a decode hears of a vanished rank.
  std::unique_ptr<RouteSubscription> subscribe(RouteListener listener) override;

  // The shared mirror of the registry (started if needed); `pdkv bootstrap --registry
  // etcd` serves it over HTTP.
  EtcdRouteWatcher& watcher() PDKV_EXCLUDES(mu_);

 private:
  EtcdRouteDirectory(std::shared_ptr<EtcdClient> client, RegistryOptions options,
                     std::shared_ptr<const ClusterKey> key);
  EtcdRankPublisher& publisher() PDKV_EXCLUDES(mu_);

  const std::shared_ptr<EtcdClient> client_;
  const RegistryOptions options_;
  const std::shared_ptr<const ClusterKey> key_;
  Mutex mu_;
  std::unique_ptr<EtcdRankPublisher> publisher_ PDKV_GUARDED_BY(mu_);
  std::unique_ptr<EtcdRouteWatcher> watcher_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::kv
