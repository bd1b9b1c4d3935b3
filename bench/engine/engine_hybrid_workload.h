// Hybrid and sparse workloads of `pdkv bench engine` (P12): models whose KV cache is not one
// group of uniform pages, turned into the same Workload (engine_workload.h) the other figures
// move, plus the plain workload of the same byte count they are compared with.
//
// A hybrid preset is a list of buffer groups, each moved as a deployment moves it:
//   * kAllPages:    every page of the prompt (full attention, MLA latents, the sparse-attention
//                   indexer whose page is [page x 128 fp8 keys][page x 4-byte scales], one
//                   contiguous piece per page);
//   * kWindowPages: only the pages holding the last `window_tokens` tokens (sliding-window
//                   attention), one more when the window does not start on a page boundary;
//   * kStateSlots:  one whole slot per buffer per request (linear-attention / Mamba state).
// Each page group has its own shuffled destination page permutation (each is its own pool on
// the decode side). A state buffer's destination is a pool of kStatePoolSlots slots and the
// request lands at one shuffled slot index, the same for every state buffer (one state index
// per request, as the decode's state pool hands out). Blocks are emitted group by group, each
// page group run-major (for each page, for each buffer of the group), then the state slots.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/engine/engine_workload.h"
#include "common/status.h"

namespace pdkv::bench {

enum class GroupKind { kAllPages, kWindowPages, kStateSlots };

struct BufferGroup {
  std::string name;  // e.g. "full", "window", "latent", "indexer", "state"
  GroupKind kind = GroupKind::kAllPages;
  uint32_t buffers = 0;
  uint64_t bytes_per_token = 0;  // page groups
  uint64_t window_tokens = 0;    // kWindowPages
  uint64_t slot_bytes = 0;       // kStateSlots
};

struct HybridPreset {
  std::string name;
  std::vector<BufferGroup> groups;
};

// Destination slots per state buffer (the request's slot is one of them).
inline constexpr uint64_t kStatePoolSlots = 4;

// The bytes per token of the plain comparison's pages: llama-style (8 KV heads x 128 x bf16).
inline constexpr uint64_t kPlainBytesPerToken = 2048;

// True for the presets P12 measures: qwen3-next, gpt-oss, deepseek-v32.
bool is_hybrid_preset(const std::string& name);
// InvalidArgument listing the hybrid presets.
Result<HybridPreset> find_hybrid_preset(const std::string& name);

// What one group contributes to a round (for the table and the JSON).
struct GroupSummary {
  std::string name;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  uint64_t block_bytes = 0;  // length of the group's (largest) block
};

struct HybridWorkload {
  Workload workload;
  std::vector<GroupSummary> groups;
  std::vector<size_t> group_first_block;  // index into workload.blocks where each group starts
};

// `seed` drives every shuffle. InvalidArgument for tokens or page of 0, or a preset group of
// no buffers or no bytes.
Result<HybridWorkload> make_hybrid_workload(const HybridPreset& preset, uint64_t tokens,
                                            uint64_t page_tokens, uint64_t seed);

// `total_bytes` as one plain KV group: pages of page_tokens x kPlainBytesPerToken bytes
// (the last one shorter when the total is not a whole number of pages), `pages_per_buffer`
// pages per buffer and as many buffers as that takes, destinations shuffled, run-major.
// InvalidArgument for a 0 argument.
Result<Workload> make_plain_workload(uint64_t total_bytes, uint64_t page_tokens,
                                     uint64_t pages_per_buffer, uint64_t seed);

}  // namespace pdkv::bench
