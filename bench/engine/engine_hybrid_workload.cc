#include "bench/engine/engine_hybrid_workload.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace pdkv::bench {
namespace {

const std::vector<HybridPreset>& hybrid_presets() {
  static const std::vector<HybridPreset> kPresets = {
      // 48 layers: 12 full-attention layers (K and V, 8 KV heads x 128 x bf16) and 36
      // linear-attention layers whose per-request state is one 2 MiB slot each.
      {"qwen3-next",
       {{"attention", GroupKind::kAllPages, 24, 2048, 0, 0},
        {"state", GroupKind::kStateSlots, 36, 0, 0, 2u << 20}}},
      // 36 layers alternating full and 128-token sliding-window attention, K and V of
      // 8 KV heads x 64 x bf16 each.
      {"gpt-oss",
       {{"full", GroupKind::kAllPages, 36, 1024, 0, 0},
        {"window", GroupKind::kWindowPages, 36, 1024, 128, 0}}},
      // 61 layers of MLA latents (576 x bf16, never sliced by TP) and the sparse-attention
      // indexer's keys (128 x fp8 + one 4-byte scale per token).
      {"deepseek-v32",
       {{"latent", GroupKind::kAllPages, 61, 1152, 0, 0},
        {"indexer", GroupKind::kAllPages, 61, 132, 0, 0}}},
  };
  return kPresets;
}

std::vector<uint64_t> shuffled(uint64_t n, std::mt19937_64& rng) {
  std::vector<uint64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  return perm;
}

// First page a group moves: 0, or the page holding the window's first token.
uint64_t first_moved_page(const BufferGroup& g, uint64_t tokens, uint64_t page_tokens) {
  if (g.kind != GroupKind::kWindowPages || tokens <= g.window_tokens) return 0;
  return (tokens - g.window_tokens) / page_tokens;
}

}  // namespace

bool is_hybrid_preset(const std::string& name) { return find_hybrid_preset(name).ok(); }

Result<HybridPreset> find_hybrid_preset(const std::string& name) {
  for (const auto& p : hybrid_presets()) {
    if (p.name == name) return p;
  }
  return invalid_argument("unknown hybrid preset '" + name +
                          "' (expected qwen3-next, gpt-oss or deepseek-v32)");
}

Result<HybridWorkload> make_hybrid_workload(const HybridPreset& preset, uint64_t tokens,
                                            uint64_t page_tokens, uint64_t seed) {
  if (tokens == 0 || page_tokens == 0) return invalid_argument("tokens and page must be > 0");
  HybridWorkload hw;
  Workload& w = hw.workload;
  w.preset.name = preset.name;
  w.tokens = tokens;
  w.page_tokens = page_tokens;
  w.pages = (tokens + page_tokens - 1) / page_tokens;
  std::mt19937_64 rng(seed);
  // The request's state slot, shared by every state buffer.
  const uint64_t state_slot = shuffled(kStatePoolSlots, rng).front();

  // Layout: the groups' buffers one after another; source and destination agree for page
  // groups, a state buffer is one slot on the source and a pool of slots on the destination.
  struct GroupLayout {
    size_t first_buffer = 0;
    uint64_t item = 0;  // page item or slot bytes
  };
  std::vector<GroupLayout> layouts;
  uint64_t offset = 0;
  uint64_t src_offset = 0;
  for (const BufferGroup& g : preset.groups) {
    const bool state = g.kind == GroupKind::kStateSlots;
    const uint64_t item = state ? g.slot_bytes : page_tokens * g.bytes_per_token;
    if (g.buffers == 0 || item == 0) {
      return invalid_argument("group '" + g.name + "' of '" + preset.name + "' is empty");
    }
    layouts.push_back({w.buffer_offsets.size(), item});
    const uint64_t dst_len = state ? kStatePoolSlots * item : w.pages * item;
    const uint64_t src_len = state ? item : w.pages * item;
    for (uint32_t b = 0; b < g.buffers; ++b) {
      w.buffer_offsets.push_back(offset);
      w.src_buffer_offsets.push_back(src_offset);
      w.buffer_lengths.push_back(dst_len);
      offset += dst_len;
      src_offset += src_len;
    }
    if (state) {
      w.preset.state_slots += g.buffers;
      w.preset.state_slot_bytes = item;
    } else {
      w.preset.kv_buffers += g.buffers;
    }
  }
  w.layout_bytes = offset;  // >= src_offset: a state pool is never smaller than its slot
  const BufferGroup& first = preset.groups.front();
  w.preset.bytes_per_token = first.bytes_per_token;
  w.item_bytes = layouts.front().item;
  w.buffer_bytes = w.buffer_lengths.front();

  for (size_t gi = 0; gi < preset.groups.size(); ++gi) {
    const BufferGroup& g = preset.groups[gi];
    const GroupLayout& l = layouts[gi];
    hw.group_first_block.push_back(w.blocks.size());
    if (g.kind == GroupKind::kStateSlots) {
      for (uint32_t b = 0; b < g.buffers; ++b) {
        const size_t i = l.first_buffer + b;
        w.blocks.push_back(
            {w.src_buffer_offsets[i], w.buffer_offsets[i] + state_slot * l.item, l.item});
      }
    } else {
      const std::vector<uint64_t> perm = shuffled(w.pages, rng);  // this group's own pool
      for (uint64_t p = first_moved_page(g, tokens, page_tokens); p < w.pages; ++p) {
        for (uint32_t b = 0; b < g.buffers; ++b) {
          const size_t i = l.first_buffer + b;
          w.blocks.push_back({w.src_buffer_offsets[i] + p * l.item,
                              w.buffer_offsets[i] + perm[p] * l.item, l.item});
        }
      }
    }
    const uint64_t blocks = w.blocks.size() - hw.group_first_block.back();
    hw.groups.push_back({g.name, blocks, blocks * l.item, l.item});
  }
  for (const auto& b : w.blocks) w.payload_bytes += b.length;
  return hw;
}

Result<Workload> make_plain_workload(uint64_t total_bytes, uint64_t page_tokens,
                                     uint64_t pages_per_buffer, uint64_t seed) {
  if (total_bytes == 0 || page_tokens == 0 || pages_per_buffer == 0) {
    return invalid_argument("plain workload: bytes, page and pages per buffer must be > 0");
  }
  Workload w;
  w.preset = {"plain", 0, kPlainBytesPerToken, 0, 0};
  w.page_tokens = page_tokens;
  w.item_bytes = page_tokens * kPlainBytesPerToken;
  const uint64_t items = (total_bytes + w.item_bytes - 1) / w.item_bytes;
  w.pages = std::min(pages_per_buffer, items);
  w.tokens = w.pages * page_tokens;
  w.preset.kv_buffers = static_cast<uint32_t>((items + w.pages - 1) / w.pages);
  w.buffer_bytes = w.pages * w.item_bytes;
  for (uint32_t b = 0; b < w.preset.kv_buffers; ++b) {
    w.buffer_offsets.push_back(b * w.buffer_bytes);
    w.src_buffer_offsets.push_back(b * w.buffer_bytes);
    w.buffer_lengths.push_back(w.buffer_bytes);
  }
  w.layout_bytes = w.preset.kv_buffers * w.buffer_bytes;

  std::mt19937_64 rng(seed);
  const std::vector<uint64_t> perm = shuffled(w.pages, rng);
  w.blocks.reserve(items);
  for (uint64_t p = 0; p < w.pages; ++p) {
    for (uint32_t b = 0; b < w.preset.kv_buffers; ++b) {
      const uint64_t item = b * w.pages + p;  // the last buffer may be partly used
      if (item >= items) continue;
      const uint64_t length =
          item + 1 == items ? total_bytes - (items - 1) * w.item_bytes : w.item_bytes;
      w.blocks.push_back({w.src_buffer_offsets[b] + p * w.item_bytes,
                          w.buffer_offsets[b] + perm[p] * w.item_bytes, length});
    }
  }
  w.payload_bytes = total_bytes;
  return w;
}

}  // namespace pdkv::bench
