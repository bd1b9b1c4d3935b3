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

void render_peer_paths(PrometheusText& out, proto::Role role, int64_t engine_rank,
                       const std::vector<engine::PeerPath>& paths) {
  out.declare("pdkv_peer_path", MetricType::kGauge,
              "Peers this rank writes to, or is written by, over each transfer path (cuda_ipc > "
              "shm > ucx > tcp_staged > tcp); why each took its path: the log, or peer_paths().");
  for (engine::PathKind path : engine::kAllPaths) {
    double n = 0;
    for (const engine::PeerPath& p : paths) n += p.path == path ? 1 : 0;
    out.sample("pdkv_peer_path",
               {{"role", role == proto::Role::kPrefill ? "prefill" : "decode"},
                {"rank", std::to_string(engine_rank)},
                {"path", std::string(engine::path_name(path))}},
               n);
  }
}

namespace {

// The lengths each KV, aux and state buffer is registered with. Memory is registered once
// per byte, yet buffers legitimately overlap: strided KV buffers interleave (FlashInfer's K
// and V pages alternate in one block), and vLLM's hybrid allocator lays a Mamba layer's
// state pages and an attention layer's K/V pages over one allocation (each group's pages
// are distinct blocks of it). Overlapping buffers of the same memory go in as their
// union, under the lowest one (the others: 0, inside it). What each room may write stays
// per buffer and per page (its grant), so the union opens nothing to a peer.
struct RegisteredLens {
  std::vector<uint64_t> kv, aux, state;
};

RegisteredLens registered_lens(const KvArgs& args) {
  RegisteredLens out{args.kv_data_lens, args.aux_data_lens, args.state_data_lens};
  const BufferMemory fallback{args.memory_kind, args.gpu_id};
  struct Entry {
    uint64_t ptr;
    uint64_t* len;
    BufferMemory memory;
  };
  std::vector<Entry> entries;
  auto add = [&](const std::vector<uint64_t>& ptrs, std::vector<uint64_t>& lens,
                 const std::vector<BufferMemory>& memory) {
    for (size_t i = 0; i < ptrs.size() && i < lens.size(); ++i) {
      if (lens[i] > 0)
        entries.push_back({ptrs[i], &lens[i], i < memory.size() ? memory[i] : fallback});
    }
  };
  add(args.kv_data_ptrs, out.kv, args.kv_data_memory);
  add(args.aux_data_ptrs, out.aux, args.aux_data_memory);
  add(args.state_data_ptrs, out.state, args.state_data_memory);
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.ptr < b.ptr; });
  for (size_t k = 1, owner = 0; k < entries.size(); ++k) {
    Entry& o = entries[owner];
    Entry& e = entries[k];
    const uint64_t owner_end = o.ptr + *o.len;
    const bool same_memory = o.memory.kind == e.memory.kind && o.memory.device == e.memory.device;
    if (e.ptr < owner_end && same_memory) {
      *o.len = std::max(owner_end, e.ptr + *e.len) - o.ptr;
      *e.len = 0;
    } else {
      owner = k;
    }
  }
  return out;
}

}  // namespace

std::vector<engine::Region> rank_regions(const KvArgs& args) {
  std::vector<engine::Region> regions;
  auto add = [&](const std::vector<uint64_t>& ptrs, const std::vector<uint64_t>& lens) {
    for (size_t i = 0; i < ptrs.size() && i < lens.size(); ++i) {
      if (lens[i] != 0) regions.push_back(engine::Region{ptrs[i], lens[i]});
    }
  };
  const RegisteredLens lens = registered_lens(args);
  add(args.kv_data_ptrs, lens.kv);
  add(args.aux_data_ptrs, lens.aux);
  add(args.state_data_ptrs, lens.state);
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
  const RegisteredLens lens = registered_lens(args);
  PDKV_RETURN_IF_ERROR(add("kv", args.kv_data_ptrs, lens.kv, args.kv_data_memory));
  PDKV_RETURN_IF_ERROR(add("aux", args.aux_data_ptrs, lens.aux, args.aux_data_memory));
  PDKV_RETURN_IF_ERROR(add("state", args.state_data_ptrs, lens.state, args.state_data_memory));
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
