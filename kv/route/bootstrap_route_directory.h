// BootstrapRouteDirectory: RouteDirectory over the HTTP bootstrap server
// (bootstrap/client.h). Control endpoints travel as the server's (rank_ip, rank_port)
// pair; this adapter turns "tcp://host:port" into that pair and back.
//
// The server knows the layout fields a decode needs for planning (sizes, heads, page
// geometry) but not the per-layer buffer structure; that is checked by the prefill
// itself when the decode registers its buffers (RegistrationResult).
// Thread safety: as BootstrapClient, usable from many threads.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "bootstrap/client.h"
#include "bootstrap/registration.h"
#include "common/cluster_key.h"
#include "common/mutex.h"
#include "kv/route/route_directory.h"

namespace pdkv::kv {

class BootstrapRouteDirectory : public RouteDirectory {
 public:
  // With `cluster_key`, every request is signed (bootstrap/request_auth.h).
  explicit BootstrapRouteDirectory(std::shared_ptr<const ClusterKey> cluster_key = nullptr);

  Status register_prefill_rank(const std::string& bootstrap_addr, const PrefillRankInfo& info,
                               TimePoint deadline) override;
  Result<PrefillRankInfo> lookup_instance(const std::string& bootstrap_addr, TimePoint deadline,
                                          const Interrupt* interrupt = nullptr) override;
  Result<PrefillRankInfo> lookup_prefill_rank(const std::string& bootstrap_addr, int64_t dp_group,
                                              int64_t tp_rank, TimePoint deadline,
                                              const Interrupt* interrupt = nullptr) override;

 private:
  Result<bootstrap::BootstrapClient> client(const std::string& bootstrap_addr) const;

  const std::shared_ptr<const ClusterKey> cluster_key_;
  // One client per server address, kept so the server id it learned (what signed
  // requests are made for) is not fetched again for every request.
  mutable Mutex mu_;
  mutable std::map<std::string, bootstrap::BootstrapClient> clients_ PDKV_GUARDED_BY(mu_);
};

// "tcp://10.0.0.1:5000" -> ("10.0.0.1", 5000); "tcp://[::1]:5000" -> ("::1", 5000).
Result<std::pair<std::string, int>> split_tcp_endpoint(const std::string& endpoint);
std::string make_tcp_endpoint(const std::string& host, int64_t port);

// The PUT /route body of a rank (kInvalidArgument for a control endpoint that is not
// tcp://host:port), and the instance-wide part of a registration read back. Shared with
// the etcd registry (kv/registry/), which stores the same JSON.
Result<bootstrap::PrefillRegistration> to_registration(const PrefillRankInfo& info);
PrefillRankInfo rank_info_from_layout(const bootstrap::InstanceLayout& layout);

}  // namespace pdkv::kv
