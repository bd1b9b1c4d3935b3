// Value types shared by the planning functions of plan/.
//
// A Block is one (src_addr, dst_addr, length) write, laid out as three uint64 so a
// vector of blocks is directly an (n, 3) uint64 array. A PageRun is a run of pages that
// steps by +1 on both sides. A Fragment says which bytes of each page of one buffer to
// copy (heterogeneous TP: each rank holds a slice of the heads); the planner emits them,
// kv_blocks/state_blocks execute them.
//
// Everything here is a plain value type; no function in plan/ keeps state, so all of
// plan/ may be called from any thread concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/status.h"

namespace pdkv::plan {

struct Block {
  uint64_t src_addr = 0;
  uint64_t dst_addr = 0;
  uint64_t length = 0;
  bool operator==(const Block&) const = default;
};
static_assert(sizeof(Block) == 3 * sizeof(uint64_t), "Block must be an (n, 3) uint64 row");

struct PageRun {
  int64_t src_first = 0;
  int64_t dst_first = 0;
  int64_t count = 0;
  bool operator==(const PageRun&) const = default;
};
static_assert(sizeof(PageRun) == 3 * sizeof(int64_t), "PageRun must be an (n, 3) int64 row");

// kKv is the generic "kv" of the Python contract; the specific KV kinds are what the
// planner emits (the reference's target_k / target_v / draft_k / draft_v / mamba_state).
// Only kState fragments apply to state buffers.
enum class BufferKind : uint8_t { kKv, kTargetK, kTargetV, kDraftK, kDraftV, kState };

inline bool is_state_kind(BufferKind kind) { return kind == BufferKind::kState; }
// "kv", "target_k", "target_v", "draft_k", "draft_v", "mamba_state".
std::string_view buffer_kind_name(BufferKind kind);
// Accepts every name above plus "state" (the contract's spelling of mamba_state).
Result<BufferKind> parse_buffer_kind(std::string_view name);

struct Fragment {
  BufferKind kind = BufferKind::kKv;
  int64_t buffer_index = 0;  // KV buffer index, or state buffer index for kState
  uint64_t src_page_stride_bytes = 0;
  uint64_t dst_page_stride_bytes = 0;
  uint64_t src_byte_offset = 0;
  uint64_t dst_byte_offset = 0;
  uint64_t bytes_per_page = 0;
  std::optional<uint64_t> page_count;  // at most this many pages per run; nullopt = all
  // Informational (the reference's src_rank / dst_rank); ignored when executing.
  int32_t src_rank = -1;
  int32_t dst_rank = -1;
  bool operator==(const Fragment&) const = default;
};

}  // namespace pdkv::plan
