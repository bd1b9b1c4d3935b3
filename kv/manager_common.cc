#include "kv/manager_common.h"

#include <cstdio>
#include <random>
#include <type_traits>
#include <variant>

#include "common/clock.h"

namespace pdkv::kv {

uint64_t random_incarnation() {
  std::random_device rd;
  uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                static_cast<uint64_t>(now().time_since_epoch().count());
  return id == 0 ? 1 : id;
}

std::string format_seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

proto::RankIdentity make_rank_identity(proto::Role role, const KvArgs& args,
                                       const std::string& control_endpoint,
                                       const std::string& engine_endpoint) {
  proto::RankIdentity id;
  id.role = role;
  id.engine_rank = static_cast<uint32_t>(args.engine_rank);
  id.attn_tp_rank = static_cast<uint32_t>(args.attn_tp_rank());
  id.attn_tp_size = static_cast<uint32_t>(args.tp_size);
  id.dp_rank = static_cast<uint32_t>(args.dp_rank());
  id.dp_size = static_cast<uint32_t>(args.dp_size);
  id.incarnation = random_incarnation();
  id.control_endpoint = control_endpoint;
  id.engine_endpoint = engine_endpoint;
  return id;
}

void render_rank_metrics(PrometheusText& out, const TransferMetrics& metrics, proto::Role role,
                         int64_t engine_rank, size_t active_rooms) {
  const bool prefill = role == proto::Role::kPrefill;
  const MetricLabels labels = {{"role", prefill ? "prefill" : "decode"},
                               {"rank", std::to_string(engine_rank)}};
  metrics.render(out, labels, prefill);
  out.declare("pdkv_active_rooms", MetricType::kGauge,
              "Rooms this rank still holds in any table (0 once every room ended).");
  out.sample("pdkv_active_rooms", labels, static_cast<double>(active_rooms));
}

std::vector<engine::Region> rank_regions(const KvArgs& args) {
  std::vector<engine::Region> regions;
  auto add = [&](const std::vector<uint64_t>& ptrs, const std::vector<uint64_t>& lens) {
    for (size_t i = 0; i < ptrs.size() && i < lens.size(); ++i) {
      if (lens[i] != 0) regions.push_back(engine::Region{ptrs[i], lens[i]});
    }
  };
  add(args.kv_data_ptrs, args.kv_data_lens);
  add(args.aux_data_ptrs, args.aux_data_lens);
  add(args.state_data_ptrs, args.state_data_lens);
  return regions;
}

Status register_rank_buffers(engine::TransferEngine& engine, const KvArgs& args,
                             engine::MemoryAccess access) {
  for (const engine::Region& r : rank_regions(args)) {
    PDKV_RETURN_IF_ERROR(engine.register_memory(r.addr, r.length, access));
  }
  return Status();
}

const proto::RankIdentity* sender_of(const proto::Message& message) {
  return std::visit(
      [](const auto& m) -> const proto::RankIdentity* {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, proto::BufferRegistration> ||
                      std::is_same_v<T, proto::PreAllocation>) {
          return &m.decode;
        } else if constexpr (std::is_same_v<T, proto::RegistrationResult>) {
          return &m.prefill;
        } else if constexpr (std::is_same_v<T, proto::Abort> || std::is_same_v<T, proto::Ping> ||
                             std::is_same_v<T, proto::Pong>) {
          return &m.sender;
        } else {
          return nullptr;
        }
      },
      message);
}

}  // namespace pdkv::kv
