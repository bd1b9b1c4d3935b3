// Transfer-index resolution for one chunk and one destination: which prefill pages go to
// which decode pages, with MLA L1.5 partial ownership on either side (docs/API.md).
//
// Semantics are the reference's resolve_transfer_indices: take the chunk's source pages
// and dst_pages[slice] (Python slice rules), truncate both to the shorter length n; n == 0
// gives two empty lists whatever the metadata; otherwise apply the mode:
//   OFF/OFF  src[:n]                         dst[:n]
//   ON/OFF   src_local (whole)               dst[:n][src_mask]        len(src_mask) == n,
//                                                                     len(src_local) == owned
//   OFF/ON   src[:n][dmask[sl]]              dst_local[dmap[sl][dmask[sl]]]
//   ON/ON    src_local[cumsum(src_mask)-1][:n][c]   dst_local[dmap[sl][:n][c]]
//            with c = src_mask[:n] & dmask[sl][:n]
// Where the reference would raise (missing metadata, boolean mask of the wrong length,
// index outside the local list) this returns InvalidArgument / OutOfRange instead, so
// no mode ever yields an index the caller did not supply. ON/OFF also fails where the
// reference returns two lists of different lengths (a local list that does not hold one
// page per owned page): callers would pair them up to the shorter one, a wrong plan.
// Masks are bytes, non-zero = owned. Pure; safe to call concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"

namespace pdkv::plan {

// Python slice semantics (negative wraps, clamped to [0, len], stop < start = empty).
struct SliceBounds {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};
SliceBounds python_slice(size_t len, std::optional<int64_t> start, std::optional<int64_t> stop);

// Prefill-side ownership of this chunk (src ON). A nullopt member is "missing".
struct SrcOwnership {
  std::optional<std::span<const uint8_t>> page_transfer_mask;  // chunk-local
  std::optional<std::span<const int64_t>> page_local_indices;
};

// Decode-side ownership of the whole request (dst ON).
struct DstOwnership {
  std::optional<std::span<const uint8_t>> page_transfer_mask;    // [N]
  std::optional<std::span<const int64_t>> page_indices_mapping;  // [N], cumsum(mask) - 1
  std::optional<std::span<const int64_t>> page_local_indices;
};

struct ResolvedIndices {
  std::vector<int64_t> src_pages;
  std::vector<int64_t> dst_pages;
};

// src_l15 / dst_l15 == nullptr means that side holds the whole cache (mode OFF).
Result<ResolvedIndices> resolve_indices(std::span<const int64_t> src_pages,
                                        std::span<const int64_t> dst_pages,
                                        std::optional<int64_t> slice_start,
                                        std::optional<int64_t> slice_stop,
                                        const SrcOwnership* src_l15, const DstOwnership* dst_l15);

}  // namespace pdkv::plan
