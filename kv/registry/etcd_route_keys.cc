#include "kv/registry/etcd_route_keys.h"

#include <charconv>

namespace pdkv::kv {
namespace {
constexpr std::string_view kRanks = "/ranks/";
}  // namespace

std::string etcd_instances_prefix(const std::string& prefix) { return prefix + "/instances/"; }

std::string etcd_instance_prefix(const std::string& prefix, const std::string& instance) {
  return etcd_instances_prefix(prefix) + instance + std::string(kRanks);
}

std::string etcd_rank_key(const std::string& prefix, const std::string& instance,
                          int64_t engine_rank) {
  return etcd_instance_prefix(prefix, instance) + std::to_string(engine_rank);
}

std::optional<EtcdRankKey> parse_etcd_rank_key(const std::string& prefix, const std::string& key) {
  const std::string head = etcd_instances_prefix(prefix);
  if (key.size() <= head.size() || key.compare(0, head.size(), head) != 0) return std::nullopt;
  const std::string_view rest = std::string_view(key).substr(head.size());
  const size_t ranks = rest.rfind(kRanks);
  if (ranks == std::string_view::npos || ranks == 0) return std::nullopt;
  const std::string_view number = rest.substr(ranks + kRanks.size());
  EtcdRankKey out;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), out.engine_rank);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() ||
      out.engine_rank < 0)
    return std::nullopt;
  out.instance = std::string(rest.substr(0, ranks));
  return out;
}

}  // namespace pdkv::kv
