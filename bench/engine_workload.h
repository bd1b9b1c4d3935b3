// Workloads of `pdkv bench engine`: the model presets of TARGETS.md turned into a source
// layout, a destination layout with shuffled pages, and the block list between them.
//
// Layout: every KV buffer holds `tokens` tokens contiguously on the source (prefill)
// side; the destination (decode) side has the same number of pages per buffer, and page
// p of the request lands on page perm[p] (one shuffled permutation for all buffers, as a
// decode free list gives one page list per request). Blocks are emitted run-major (for
// each page, for each buffer), the order of SPEC §6.3. qwen3-next adds 36 state slots of
// 2 MiB each, one block per slot.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/write_block.h"

namespace pdkv::bench {

struct ModelPreset {
  std::string name;
  uint32_t kv_buffers = 0;
  uint64_t bytes_per_token = 0;  // per KV buffer
  uint32_t state_slots = 0;
  uint64_t state_slot_bytes = 0;
};

// InvalidArgument listing the known names.
Result<ModelPreset> find_preset(const std::string& name);

struct Workload {
  ModelPreset preset;
  uint64_t tokens = 0;
  uint64_t page_tokens = 0;
  uint64_t pages = 0;
  uint64_t item_bytes = 0;               // one page of one KV buffer
  uint64_t buffer_bytes = 0;             // one KV buffer (pages x item)
  uint64_t layout_bytes = 0;             // whole source (= whole destination) layout
  std::vector<uint64_t> buffer_offsets;  // of each KV buffer / state slot in the layout
  std::vector<uint64_t> buffer_lengths;
  std::vector<engine::WriteBlock> blocks;  // src/dst as offsets into the layouts
  uint64_t payload_bytes = 0;
};

// `seed` drives the page shuffle. InvalidArgument for tokens/page of 0.
Result<Workload> make_workload(const ModelPreset& preset, uint64_t tokens, uint64_t page_tokens,
                               uint64_t seed);

}  // namespace pdkv::bench
