#include "kv/runtime/manager_common.h"

#include <algorithm>
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

namespace {

// The length each KV buffer is registered with. Strided KV buffers interleave
// (FlashInfer's K and V pages alternate in one block) and memory is registered once per
// byte, so overlapping strided buffers go in as their union, under the lowest one (the
// others: 0, inside it).
std::vector<uint64_t> kv_registered_lens(const KvArgs& args) {
  std::vector<uint64_t> lens = args.kv_data_lens;
  const BufferMemory fallback{args.memory_kind, args.gpu_id};
  auto memory = [&](size_t i) {
    return i < args.kv_data_memory.size() ? args.kv_data_memory[i] : fallback;
  };
  std::vector<size_t> strided;
  for (size_t i = 0; i < lens.size(); ++i) {
    if (args.kv_page_stride(i) > args.kv_item_lens[i] && lens[i] > 0) strided.push_back(i);
  }
  std::sort(strided.begin(), strided.end(),
            [&](size_t a, size_t b) { return args.kv_data_ptrs[a] < args.kv_data_ptrs[b]; });
  for (size_t k = 1, owner = strided.empty() ? 0 : strided[0]; k < strided.size(); ++k) {
    const size_t i = strided[k];
    const uint64_t owner_end = args.kv_data_ptrs[owner] + lens[owner];
    const bool same_memory =
        memory(owner).kind == memory(i).kind && memory(owner).device == memory(i).device;
    if (args.kv_data_ptrs[i] < owner_end && same_memory) {
      lens[owner] = std::max(owner_end, args.kv_data_ptrs[i] + lens[i]) - args.kv_data_ptrs[owner];
      lens[i] = 0;
    } else {
      owner = i;
    }
  }
  return lens;
}

}  // namespace

std::vector<engine::Region> rank_regions(const KvArgs& args) {
  std::vector<engine::Region> regions;
  auto add = [&](const std::vector<uint64_t>& ptrs, const std::vector<uint64_t>& lens) {
    for (size_t i = 0; i < ptrs.size() && i < lens.size(); ++i) {
      if (lens[i] != 0) regions.push_back(engine::Region{ptrs[i], lens[i]});
    }
  };
  add(args.kv_data_ptrs, kv_registered_lens(args));
  add(args.aux_data_ptrs, args.aux_data_lens);
  add(args.state_data_ptrs, args.state_data_lens);
  return regions;
}

Status register_rank_buffers(engine::TransferEngine& engine, const KvArgs& args,
                             engine::MemoryAccess access) {
  const BufferMemory fallback{args.memory_kind, args.gpu_id};
  auto add = [&](const char* name, const std::vector<uint64_t>& ptrs,
                 const std::vector<uint64_t>& lens,
                 const std::vector<BufferMemory>& memory) -> Status {
    for (size_t i = 0; i < ptrs.size() && i < lens.size(); ++i) {
      if (lens[i] == 0) continue;
      const BufferMemory& m = i < memory.size() ? memory[i] : fallback;
      Status s =
          engine.register_memory(ptrs[i], lens[i], access, m.kind, static_cast<int>(m.device));
      // The engine's reason says what is wrong with the range; which buffer it was is
      // what the caller needs to find it.
      if (!s.ok())
        return Status(s.code(),
                      std::string(name) + " buffer " + std::to_string(i) + ": " + s.message());
    }
    return Status();
  };
  PDKV_RETURN_IF_ERROR(add("kv", args.kv_data_ptrs, kv_registered_lens(args), args.kv_data_memory));
  PDKV_RETURN_IF_ERROR(add("aux", args.aux_data_ptrs, args.aux_data_lens, args.aux_data_memory));
  PDKV_RETURN_IF_ERROR(
      add("state", args.state_data_ptrs, args.state_data_lens, args.state_data_memory));
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
