// Workloads of `pdkv bench engine`: the model presets (BENCHMARKS.md) turned into a source
// layout, a destination layout with shuffled pages, and the block list between them.
//
// Layout: every KV buffer holds `tokens` tokens contiguously on the source (prefill)
// side; the destination (decode) side has the same number of pages per buffer, and page
// p of the request lands on page perm[p] (one shuffled permutation for all buffers, as a
// decode free list gives one page list per request). Blocks are emitted run-major (for
// each page, for each buffer), the order the reference planner emits. qwen3-next adds 36
// state slots of 2 MiB each, one block per slot.
//
// head_split N > 1 models heterogeneous TP (prefill TP = N x decode TP, as P6's 4 -> 2 is
// N = 2): a source token holds bytes_per_token / N, a destination token N times that, and
// the prefill rank owns the first share of each destination token. Every token of every
// page is then its own block (bytes_per_token / N bytes, destination stride N times that),
// the block pattern the managers generate for P6.
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
  uint64_t head_split = 1;
  uint64_t item_bytes = 0;               // one page of one KV buffer, destination side
  uint64_t buffer_bytes = 0;             // one KV buffer (pages x item), destination side
  uint64_t layout_bytes = 0;             // whole destination layout (>= the source one)
  std::vector<uint64_t> buffer_offsets;  // of each KV buffer / state slot, destination
  std::vector<uint64_t> buffer_lengths;
  // Source offsets of each buffer / slot (equal to buffer_offsets when head_split is 1;
  // the source layout is then packed the same way, so layout_bytes bounds it too).
  std::vector<uint64_t> src_buffer_offsets;
  std::vector<engine::WriteBlock> blocks;  // src/dst as offsets into the layouts
  uint64_t payload_bytes = 0;
};

// `seed` drives the page shuffle. InvalidArgument for tokens/page/head_split of 0, or a
// head_split that does not divide bytes_per_token.
Result<Workload> make_workload(const ModelPreset& preset, uint64_t tokens, uint64_t page_tokens,
                               uint64_t seed, uint64_t head_split = 1);

}  // namespace pdkv::bench
