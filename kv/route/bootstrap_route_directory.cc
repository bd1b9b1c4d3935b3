#include "kv/route/bootstrap_route_directory.h"

#include "bootstrap/client.h"
#include "common/host_port.h"
#include "kv/route/stage_address.h"

namespace pdkv::kv {
namespace {

std::vector<int64_t> to_signed(const std::vector<uint64_t>& v) { return {v.begin(), v.end()}; }
std::vector<uint64_t> to_unsigned(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

PrefillRankInfo rank_info_from_layout(const bootstrap::InstanceLayout& l) {
  PrefillRankInfo info;
  info.dp_size = l.dp_size;
  info.tp_size = l.tp_size_per_dp();
  info.enable_mla_l1_5_cache = l.enable_mla_l1_5_cache;
  info.layout.page_size = static_cast<uint32_t>(l.page_size);
  info.layout.kv_head_num = static_cast<uint32_t>(l.kv_head_num);
  info.layout.total_kv_head_num = static_cast<uint32_t>(l.total_kv_head_num);
  info.layout.head_dim = static_cast<uint32_t>(l.head_dim);
  info.layout.dtype_bytes = static_cast<uint32_t>(l.dtype_bytes);
  info.layout.page_layout =
      l.page_layout == "HND" ? proto::PageLayout::kHND : proto::PageLayout::kNHD;
  info.layout.is_mla = l.is_mla;
  info.layout.target_layer_num = static_cast<uint32_t>(l.target_layer_num);
  info.layout.draft_total_kv_head_num = static_cast<uint32_t>(l.draft_total_kv_head_num);
  info.layout.draft_head_dim = static_cast<uint32_t>(l.draft_head_dim);
  info.kv_item_lens = to_unsigned(l.kv_item_lens);
  info.state_item_lens = to_unsigned(l.state_item_lens);
  info.pp_size = l.pp_size;
  return info;
}

Result<std::pair<std::string, int>> split_tcp_endpoint(const std::string& endpoint) {
  Result<HostPort> hp = parse_tcp_endpoint(endpoint);
  if (!hp.ok()) return hp.status().with_context("control endpoint");
  return std::make_pair(std::move(hp->host), static_cast<int>(hp->port));
}

std::string make_tcp_endpoint(const std::string& host, int64_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

namespace {
constexpr size_t kMaxCachedClients = 64;
}  // namespace

BootstrapRouteDirectory::BootstrapRouteDirectory(std::shared_ptr<const ClusterKey> cluster_key)
    : cluster_key_(std::move(cluster_key)) {}

Result<bootstrap::BootstrapClient> BootstrapRouteDirectory::client(
    const std::string& bootstrap_addr) const {
  MutexLock lock(mu_);
  if (auto it = clients_.find(bootstrap_addr); it != clients_.end()) return it->second;
  bootstrap::ClientOptions options;
  options.cluster_key = cluster_key_;
  // Nothing interrupts a connect in progress (a decode's shutdown waits for it), and a
  // peer that does not accept within this is retried by the next attempt anyway: a
  // connect takes well under a millisecond inside a data centre.
  options.connect_timeout = std::chrono::milliseconds(500);
  // A later pipeline stage's address reaches the same server, asking for its stage.
  PDKV_ASSIGN_OR_RETURN(StageAddress stage, split_stage_address(bootstrap_addr));
  options.pp_rank = stage.pp_rank;
  PDKV_ASSIGN_OR_RETURN(auto made, bootstrap::BootstrapClient::from_address(stage.server, options));
  // A handful of servers per deployment; the bound only keeps a caller that names many
  // addresses from growing the map (a dropped client just learns its server's id again).
  if (clients_.size() >= kMaxCachedClients) clients_.clear();
  clients_.emplace(bootstrap_addr, made);
  return made;
}

Result<bootstrap::PrefillRegistration> to_registration(const PrefillRankInfo& info) {
  PDKV_ASSIGN_OR_RETURN(auto host_port, split_tcp_endpoint(info.control_endpoint));
  bootstrap::PrefillRegistration reg;
  reg.engine_rank = info.engine_rank;
  reg.rank_ip = host_port.first;
  reg.rank_port = host_port.second;
  reg.pp_rank = info.pp_rank;
  bootstrap::InstanceLayout& l = reg.layout;
  l.pp_size = info.pp_size;
  l.world_size = info.tp_size * info.dp_size;
  l.dp_size = info.dp_size;
  l.enable_mla_l1_5_cache = info.enable_mla_l1_5_cache;
  l.kv_item_lens = to_signed(info.kv_item_lens);
  l.state_item_lens = to_signed(info.state_item_lens);
  l.page_size = info.layout.page_size;
  l.total_kv_head_num = info.layout.total_kv_head_num;
  // Heads per rank differ between ranks of a GQA-replicated instance; the instance-wide
  // field is the model's, which every rank agrees on.
  l.kv_head_num = info.layout.total_kv_head_num;
  l.head_dim = info.layout.head_dim;
  l.dtype_bytes = info.layout.dtype_bytes;
  l.page_layout = info.layout.page_layout == proto::PageLayout::kHND ? "HND" : "NHD";
  l.is_mla = info.layout.is_mla;
  l.target_layer_num = info.layout.target_layer_num;
  l.draft_total_kv_head_num = info.layout.draft_total_kv_head_num;
  l.draft_head_dim = info.layout.draft_head_dim;
  return reg;
}

Status BootstrapRouteDirectory::register_prefill_rank(const std::string& addr,
                                                      const PrefillRankInfo& info,
                                                      TimePoint deadline) {
  PDKV_ASSIGN_OR_RETURN(auto client, this->client(addr));
  PDKV_ASSIGN_OR_RETURN(auto reg, to_registration(info));
  return client.register_rank(reg, deadline);
}

Result<PrefillRankInfo> BootstrapRouteDirectory::lookup_instance(const std::string& addr,
                                                                 TimePoint deadline,
                                                                 const Interrupt* interrupt) {
  PDKV_ASSIGN_OR_RETURN(auto client, this->client(addr));
  PDKV_ASSIGN_OR_RETURN(auto layout, client.parallel_info(deadline, interrupt));
  return rank_info_from_layout(layout);
}

Result<PrefillRankInfo> BootstrapRouteDirectory::lookup_prefill_rank(const std::string& addr,
                                                                     int64_t dp_group,
                                                                     int64_t tp_rank,
                                                                     TimePoint deadline,
                                                                     const Interrupt* interrupt) {
  PDKV_ASSIGN_OR_RETURN(auto client, this->client(addr));
  PDKV_ASSIGN_OR_RETURN(auto layout, client.parallel_info(deadline, interrupt));
  PDKV_ASSIGN_OR_RETURN(auto rank, client.rank(dp_group, tp_rank, deadline, interrupt));
  PrefillRankInfo info = rank_info_from_layout(layout);
  info.engine_rank = rank.engine_rank;
  info.control_endpoint = make_tcp_endpoint(rank.rank_ip, rank.rank_port);
  return info;
}

}  // namespace pdkv::kv
