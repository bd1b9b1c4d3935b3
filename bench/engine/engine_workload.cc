#include "bench/engine/engine_workload.h"

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
                               uint64_t seed, uint64_t head_split) {
  if (tokens == 0 || page_tokens == 0) return invalid_argument("tokens and page must be > 0");
  if (head_split == 0 || preset.bytes_per_token % head_split != 0) {
    return invalid_argument("head split must be > 0 and divide the bytes per token (" +
                            std::to_string(preset.bytes_per_token) + ")");
  }
  Workload w;
  w.preset = preset;
  w.tokens = tokens;
  w.page_tokens = page_tokens;
  w.head_split = head_split;
  w.pages = (tokens + page_tokens - 1) / page_tokens;
  w.item_bytes = page_tokens * preset.bytes_per_token;
  w.buffer_bytes = w.pages * w.item_bytes;
  const uint64_t src_token = preset.bytes_per_token / head_split;
  const uint64_t src_item = page_tokens * src_token;
  uint64_t offset = 0;
  uint64_t src_offset = 0;
  for (uint32_t b = 0; b < preset.kv_buffers; ++b) {
    w.buffer_offsets.push_back(offset);
    w.src_buffer_offsets.push_back(src_offset);
    w.buffer_lengths.push_back(w.buffer_bytes);
    offset += w.buffer_bytes;
    src_offset += w.pages * src_item;
  }
  for (uint32_t s = 0; s < preset.state_slots; ++s) {
    w.buffer_offsets.push_back(offset);
    w.src_buffer_offsets.push_back(src_offset);
    w.buffer_lengths.push_back(preset.state_slot_bytes);
    offset += preset.state_slot_bytes;
    src_offset += preset.state_slot_bytes;
  }
  w.layout_bytes = offset;

  std::vector<uint64_t> perm(w.pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);

  const uint64_t blocks_per_item = head_split == 1 ? 1 : page_tokens;
  w.blocks.reserve(w.pages * preset.kv_buffers * blocks_per_item + preset.state_slots);
  for (uint64_t p = 0; p < w.pages; ++p) {
    for (uint32_t b = 0; b < preset.kv_buffers; ++b) {
      const uint64_t src = w.src_buffer_offsets[b] + p * src_item;
      const uint64_t dst = w.buffer_offsets[b] + perm[p] * w.item_bytes;
      if (head_split == 1) {
        w.blocks.push_back({src, dst, w.item_bytes});
        continue;
      }
      for (uint64_t t = 0; t < page_tokens; ++t) {
        w.blocks.push_back({src + t * src_token, dst + t * preset.bytes_per_token, src_token});
      }
    }
  }
  for (uint32_t s = 0; s < preset.state_slots; ++s) {
    w.blocks.push_back({w.src_buffer_offsets[preset.kv_buffers + s],
                        w.buffer_offsets[preset.kv_buffers + s], preset.state_slot_bytes});
  }
  for (const auto& b : w.blocks) w.payload_bytes += b.length;
  return w;
}

}  // namespace pdkv::bench
