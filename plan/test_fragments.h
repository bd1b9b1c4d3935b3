// Fragments for the plan tests, built from their numbers in the order a planner reads them.
#pragma once

#include <cstdint>
#include <optional>

#include "plan/types.h"

namespace pdkv::plan::testing {

// Per page of buffer `buffer`: bytes [so, so + n) of the source page (stride ss) go to
// [dof, dof + n) of the destination page (stride ds); `cap`: at most that many pages a run.
inline Fragment frag(int64_t buffer, uint64_t ss, uint64_t ds, uint64_t so, uint64_t dof,
                     uint64_t n, std::optional<uint64_t> cap = std::nullopt,
                     BufferKind kind = BufferKind::kKv) {
  Fragment f;
  f.kind = kind;
  f.buffer_index = buffer;
  f.src_page_stride_bytes = ss;
  f.dst_page_stride_bytes = ds;
  f.src_byte_offset = so;
  f.dst_byte_offset = dof;
  f.bytes_per_page = n;
  f.page_count = cap;
  return f;
}

}  // namespace pdkv::plan::testing
