// KvArgs: what one rank tells pdkv about its buffers and its place in the instance,
// the C++ twin of the Python KVArgs (docs/API.md).
//
// validate() checks everything a rank can get wrong about itself (equal list lengths,
// buffer indices, address overflow, rank ranges) so that later failures are about the
// peer, never about a malformed local description. Value type.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/device/memory_kind.h"
#include "proto/messages.h"

namespace pdkv::kv {

// What one buffer is made of, for its registration (engine/device/memory_kind.h).
struct BufferMemory {
  engine::MemoryKind kind = engine::MemoryKind::kAuto;
  int64_t device = -1;  // CUDA device ordinal, -1 = whichever the driver reports
};

struct KvArgs {
  int64_t engine_rank = 0;  // global rank in its instance
  int64_t tp_size = 1;      // attention TP size per DP group
  int64_t dp_size = 1;
  int64_t page_size = 1;  // tokens per page

  std::vector<uint64_t> kv_data_ptrs;
  std::vector<uint64_t> kv_data_lens;
  std::vector<uint64_t> kv_item_lens;               // bytes per page per buffer
  std::vector<std::vector<int64_t>> layer_buffers;  // KV buffer indices of each KV layer
  std::vector<int64_t> kv_layer_ids;                // empty = 0..layers-1

  int64_t kv_head_num = 1;        // KV heads held by this rank (per buffer)
  int64_t total_kv_head_num = 1;  // KV heads of the model
  int64_t head_dim = 0;
  int64_t dtype_bytes = 0;
  proto::PageLayout page_layout = proto::PageLayout::kNHD;
  bool is_mla = false;
  // Speculative decoding: KV layers (layer_buffers entries) from this index on belong to
  // the draft model; 0 = none. The
  // draft's head count and head size may differ from the target's (0 = the same).
  int64_t target_layer_num = 0;
  int64_t draft_kv_head_num = 0;
  int64_t draft_total_kv_head_num = 0;
  int64_t draft_head_dim = 0;

  std::vector<uint64_t> aux_data_ptrs;
  std::vector<uint64_t> aux_data_lens;
  std::vector<uint64_t> aux_item_lens;

  std::vector<uint64_t> state_data_ptrs;
  std::vector<uint64_t> state_data_lens;
  std::vector<uint64_t> state_item_lens;
  std::vector<int64_t> state_layer_ids;

  // State groups (docs/API.md): a room carries one index list per group, each paired
  // prefill -> decode on its own. The group of each state buffer (empty = all group 0).
  std::vector<int64_t> state_buffer_groups;
  // Per KV layer: -1 = the room's chunked pages, g >= 0 = state group g's list names
  // this layer's pages (sliding-window or other per-group page tables). Empty = all -1.
  std::vector<int64_t> kv_layer_groups;
  // State groups whose lists are sliding-window page lists: the two sides may count the
  // window differently (sglang's prefill lists the window of its fill ids, which can hold
  // the token it sampled and so open one more page), so a prefill pairs the leading
  // min(len) entries of such a group instead of failing the room. Read by the prefill,
  // which pairs; empty = every group pairs lists of equal length only.
  std::vector<int64_t> window_state_groups;
  // Pipeline parallelism: a prefill rank's stage among pp_size (its KV layers are that
  // stage's only); a decode manager receives from prefill stage pp_rank, whose layers its
  // buffers are (kv/route/stage_address.h). 1 / 0 = no pipeline parallelism.
  int64_t pp_size = 1;
  int64_t pp_rank = 0;
  // Per KV buffer: bytes from page i to page i+1 (0 or empty = its kv_item_lens entry).
  std::vector<uint64_t> kv_page_strides;
  // Per state buffer: bytes from slot i to slot i+1 (0 or empty = its state_item_lens
  // entry). A strided state buffer is one piece of a larger per-slot page (a Mamba layer's
  // conv sub-projections and SSM state, each sharded between TP sizes on its own).
  std::vector<uint64_t> state_page_strides;

  // What the buffers are made of: memory_kind / gpu_id for every buffer, unless the
  // buffer's entry in *_data_memory (empty, or one per buffer) says otherwise (a tensor
  // handed over DLPack knows its own kind and device).
  engine::MemoryKind memory_kind = engine::MemoryKind::kAuto;
  int64_t gpu_id = -1;
  std::vector<BufferMemory> kv_data_memory;
  std::vector<BufferMemory> aux_data_memory;
  std::vector<BufferMemory> state_data_memory;

  int64_t world_size() const { return tp_size * dp_size; }
  int64_t attn_tp_rank() const { return engine_rank % tp_size; }
  int64_t dp_rank() const { return engine_rank / tp_size; }
  // Global KV layer ids, defaulted (0..n-1) when kv_layer_ids is empty.
  std::vector<int64_t> effective_kv_layer_ids() const;
  // max(kv ids ∪ state ids) + 1, or the KV layer count if both are empty: hybrid models
  // have layers with state only, and the layerwise step counter counts every layer.
  int64_t layer_num() const;

  // The number of state groups: 1 + the highest group named in state_buffer_groups or
  // kv_layer_groups; 1 with state buffers but no groups, 0 with neither.
  int64_t state_group_count() const;
  // The group of KV layer l (-1 = chunked pages) and of state buffer s.
  int64_t kv_layer_group(size_t l) const {
    return kv_layer_groups.empty() ? -1 : kv_layer_groups[l];
  }
  int64_t state_buffer_group(size_t s) const {
    return state_buffer_groups.empty() ? 0 : state_buffer_groups[s];
  }
  bool has_group_kv_layers() const;
  bool is_window_state_group(int64_t g) const {
    return std::find(window_state_groups.begin(), window_state_groups.end(), g) !=
           window_state_groups.end();
  }
  // Bytes from page i to i+1 of KV buffer b.
  uint64_t kv_page_stride(size_t b) const {
    return kv_page_strides.empty() || kv_page_strides[b] == 0 ? kv_item_lens[b]
                                                              : kv_page_strides[b];
  }
  // Bytes from slot i to i+1 of state buffer s.
  uint64_t state_page_stride(size_t s) const {
    return state_page_strides.empty() || state_page_strides[s] == 0 ? state_item_lens[s]
                                                                    : state_page_strides[s];
  }

  // InvalidArgument naming the field for anything inconsistent.
  Status validate() const;

  // The layout a peer checks against its own (proto KvLayout).
  proto::KvLayout layout() const;
};

// Checks that a decode's registered layout can receive from this prefill:
// same page size and layout, same number of KV layers and buffers per layer, MLA on both
// or neither, equal head_dim and dtype, the same model head count, the same state groups
// (state_buffer_groups, kv_layer_groups). InvalidArgument with both values named on the
// first mismatch.
Status check_layout_compatible(const KvArgs& prefill, const proto::KvLayout& decode);

// The decode-side check against a prefill instance's published layout, which lacks the
// per-layer structure (the prefill checks that on registration): page size and layout,
// MLA, head_dim, dtype, model head count and the number of KV buffers.
Status check_instance_compatible(const KvArgs& decode, const proto::KvLayout& prefill,
                                 size_t prefill_kv_buffers);

}  // namespace pdkv::kv
