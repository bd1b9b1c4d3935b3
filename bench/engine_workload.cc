#include "bench/engine_workload.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace pdkv::bench {

Result<ModelPreset> find_preset(const std::string& name) {
  static const ModelPreset kPresets[] = {
      {"llama3-8b", 64, 2048, 0, 0},
      {"deepseek-v3", 61, 1152, 0, 0},
      {"qwen3-next", 24, 2048, 36, 2u << 20},
      {"tiny", 8, 256, 0, 0},
  };
  for (const auto& p : kPresets) {
    if (p.name == name) return p;
  }
  return invalid_argument("unknown model preset '" + name +
                          "' (expected llama3-8b, deepseek-v3, qwen3-next or tiny)");
}

Result<Workload> make_workload(const ModelPreset& preset, uint64_t tokens, uint64_t page_tokens,
                               uint64_t seed) {
  if (tokens == 0 || page_tokens == 0) return invalid_argument("tokens and page must be > 0");
  Workload w;
  w.preset = preset;
  w.tokens = tokens;
  w.page_tokens = page_tokens;
  w.pages = (tokens + page_tokens - 1) / page_tokens;
  w.item_bytes = page_tokens * preset.bytes_per_token;
  w.buffer_bytes = w.pages * w.item_bytes;
  uint64_t offset = 0;
  for (uint32_t b = 0; b < preset.kv_buffers; ++b) {
    w.buffer_offsets.push_back(offset);
    w.buffer_lengths.push_back(w.buffer_bytes);
    offset += w.buffer_bytes;
  }
  for (uint32_t s = 0; s < preset.state_slots; ++s) {
    w.buffer_offsets.push_back(offset);
    w.buffer_lengths.push_back(preset.state_slot_bytes);
    offset += preset.state_slot_bytes;
  }
  w.layout_bytes = offset;

  std::vector<uint64_t> perm(w.pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);

  w.blocks.reserve(w.pages * preset.kv_buffers + preset.state_slots);
  for (uint64_t p = 0; p < w.pages; ++p) {
    for (uint32_t b = 0; b < preset.kv_buffers; ++b) {
      const uint64_t base = w.buffer_offsets[b];
      w.blocks.push_back({base + p * w.item_bytes, base + perm[p] * w.item_bytes, w.item_bytes});
    }
  }
  for (uint32_t s = 0; s < preset.state_slots; ++s) {
    const uint64_t base = w.buffer_offsets[preset.kv_buffers + s];
    w.blocks.push_back({base, base, preset.state_slot_bytes});
  }
  for (const auto& b : w.blocks) w.payload_bytes += b.length;
  return w;
}

}  // namespace pdkv::bench
