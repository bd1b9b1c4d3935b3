#include "bench/engine/engine_bench_util.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <fstream>

namespace pdkv::bench {

SourceMemory::SourceMemory(size_t bytes) : size(bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  data = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

SourceMemory::~SourceMemory() {
  if (data != nullptr) munmap(data, size);
}

Result<Workload> bench_workload(const EngineBenchArgs& args) {
  PDKV_ASSIGN_OR_RETURN(ModelPreset preset, find_preset(args.model));
  if (args.decode_tp == 0 || preset.bytes_per_token % args.decode_tp != 0) {
    return invalid_argument("--decode-tp must divide the model's bytes per token");
  }
  preset.bytes_per_token /= args.decode_tp;
  return make_workload(preset, args.tokens, args.page, args.seed, args.head_split);
}

std::vector<engine::testing::PeerRegion> peer_regions(const Workload& w) {
  std::vector<engine::testing::PeerRegion> regions;
  for (size_t i = 0; i < w.buffer_offsets.size(); ++i) {
    regions.push_back({w.buffer_offsets[i], w.buffer_lengths[i]});
  }
  return regions;
}

std::vector<engine::WriteBlock> absolute_blocks(const Workload& w, uint64_t src_base,
                                                uint64_t dst_base) {
  std::vector<engine::WriteBlock> blocks;
  blocks.reserve(w.blocks.size());
  for (const auto& b : w.blocks) {
    blocks.push_back({src_base + b.src_addr, dst_base + b.dst_addr, b.length});
  }
  return blocks;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

nlohmann::json figure_json(const Figure& figure, const nlohmann::json& extra) {
  nlohmann::json j = {{"ratio", figure.ratio},
                      {"value", figure.value},
                      {"baseline", figure.baseline},
                      {"unit", "GB/s"},
                      {"verified_bytes_ok", figure.verified},
                      {"baseline_kind", figure.baseline_kind},
                      {"target_ratio", figure.target_ratio}};
  j.update(extra);
  return j;
}

Status write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return internal_error("cannot write " + path);
  return Status();
}

size_t first_bad_block(const Workload& w, const uint8_t* src, const uint8_t* dst) {
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    const auto& b = w.blocks[i];
    if (std::memcmp(dst + b.dst_addr, src + b.src_addr, b.length) != 0) return i;
  }
  return w.blocks.size();
}

Result<size_t> BenchLink::verification_round(const Workload& w, const SourceMemory& src,
                                             const std::string& what) {
  std::memset(dst->data(), 0xEE, dst->size());
  PDKV_RETURN_IF_ERROR(round(what));
  return first_bad_block(w, src.data, dst->data());
}

Result<std::unique_ptr<BenchLink>> start_link(const Workload& w, const SourceMemory& src,
                                              const engine::EngineOptions& options,
                                              const std::vector<std::string>& peer_env,
                                              uint64_t src_base) {
  auto link = std::make_unique<BenchLink>();
  PDKV_ASSIGN_OR_RETURN(link->dst, engine::testing::GuardedBuffer::create(w.layout_bytes));
  PDKV_ASSIGN_OR_RETURN(
      link->peer, engine::testing::EnginePeerProcess::start(*link->dst, peer_regions(w), peer_env));
  PDKV_ASSIGN_OR_RETURN(link->sender, engine::TransferEngine::create(options));
  if (src_base == 0) src_base = reinterpret_cast<uint64_t>(src.data);
  // Auto: a device copy of the layout registers as device memory.
  PDKV_RETURN_IF_ERROR(link->sender->register_memory(src_base, src.size));
  PDKV_ASSIGN_OR_RETURN(link->session, link->sender->open_session(link->peer->endpoint()));
  link->blocks = absolute_blocks(w, src_base, link->peer->remote_base());
  return link;
}

}  // namespace pdkv::bench
