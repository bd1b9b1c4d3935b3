#include "plan/resolve.h"

#include <algorithm>
#include <string>

namespace pdkv::plan {
namespace {

size_t clamp_index(size_t len, std::optional<int64_t> v, size_t fallback) {
  if (!v) return fallback;
  int64_t x = *v;
  const auto slen = static_cast<int64_t>(len);
  if (x < 0) x = std::max<int64_t>(x + slen, 0);
  return static_cast<size_t>(std::min(x, slen));
}

std::string len_text(size_t a, size_t b) {
  return "(" + std::to_string(a) + " vs " + std::to_string(b) + ")";
}

// out = values[mask] (numpy boolean indexing: lengths must match).
Status masked(std::span<const int64_t> values, std::span<const uint8_t> mask, const char* what,
              std::vector<int64_t>& out) {
  out.clear();
  if (mask.empty()) return Status();  // numpy: an empty boolean index selects nothing
  if (values.size() != mask.size()) {
    return invalid_argument(std::string(what) + ": mask length does not match the pages " +
                            len_text(mask.size(), values.size()));
  }
  size_t owned = 0;
  for (uint8_t m : mask) owned += m != 0;
  out.clear();
  out.reserve(owned);
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i]) out.push_back(values[i]);
  }
  return Status();
}

// out[i] = local[index[i]]; every index must address `local`.
Status gather(std::span<const int64_t> local, std::span<const int64_t> index, const char* what,
              std::vector<int64_t>& out) {
  out.resize(index.size());
  for (size_t i = 0; i < index.size(); ++i) {
    const int64_t k = index[i];
    if (k < 0 || static_cast<uint64_t>(k) >= local.size()) {
      return out_of_range(std::string(what) + ": local index " + std::to_string(k) +
                          " outside page_local_indices of length " + std::to_string(local.size()));
    }
    out[i] = local[static_cast<size_t>(k)];
  }
  return Status();
}

Status require_src(const SrcOwnership& s) {
  if (!s.page_transfer_mask || !s.page_local_indices) {
    return invalid_argument(
        "prefill L1.5 is on but page_transfer_mask/page_local_indices are missing");
  }
  return Status();
}

Status require_dst(const DstOwnership& d) {
  if (!d.page_transfer_mask || !d.page_indices_mapping || !d.page_local_indices) {
    return invalid_argument(
        "decode L1.5 is on but page_transfer_mask/page_indices_mapping/page_local_indices "
        "are missing");
  }
  if (d.page_transfer_mask->size() != d.page_indices_mapping->size()) {
    return invalid_argument("decode page_transfer_mask and page_indices_mapping differ in length " +
                            len_text(d.page_transfer_mask->size(), d.page_indices_mapping->size()));
  }
  return Status();
}

}  // namespace

SliceBounds python_slice(size_t len, std::optional<int64_t> start, std::optional<int64_t> stop) {
  SliceBounds b;
  b.begin = clamp_index(len, start, 0);
  b.end = clamp_index(len, stop, len);
  if (b.end < b.begin) b.end = b.begin;
  return b;
}

Result<ResolvedIndices> resolve_indices(std::span<const int64_t> src_pages,
                                        std::span<const int64_t> dst_pages,
                                        std::optional<int64_t> slice_start,
                                        std::optional<int64_t> slice_stop,
                                        const SrcOwnership* src_l15, const DstOwnership* dst_l15) {
  const SliceBounds sl = python_slice(dst_pages.size(), slice_start, slice_stop);
  const size_t n = std::min(src_pages.size(), sl.size());
  ResolvedIndices out;
  if (n == 0) return out;  // the reference's fast path: no metadata is consulted
  const auto src = src_pages.first(n);
  const auto dst = dst_pages.subspan(sl.begin, n);

  if (!src_l15 && !dst_l15) {
    out.src_pages.assign(src.begin(), src.end());
    out.dst_pages.assign(dst.begin(), dst.end());
    return out;
  }
  if (src_l15 && !dst_l15) {
    PDKV_RETURN_IF_ERROR(require_src(*src_l15));
    PDKV_RETURN_IF_ERROR(masked(dst, *src_l15->page_transfer_mask, "ON/OFF", out.dst_pages));
    const auto local = *src_l15->page_local_indices;
    if (local.size() != out.dst_pages.size()) {
      // The reference pairs the two lists as they are and the block planner stops at the
      // shorter one, so every page after the first missing local index would be copied
      // from its neighbour's source page, or not at all.
      return invalid_argument(
          "ON/OFF: prefill page_local_indices must hold one page per page the mask owns " +
          len_text(local.size(), out.dst_pages.size()));
    }
    out.src_pages.assign(local.begin(), local.end());
    return out;
  }

  PDKV_RETURN_IF_ERROR(require_dst(*dst_l15));
  const auto dmask_all = *dst_l15->page_transfer_mask;
  const SliceBounds msl = python_slice(dmask_all.size(), slice_start, slice_stop);
  auto dmask = dmask_all.subspan(msl.begin, msl.size());
  auto dmap = dst_l15->page_indices_mapping->subspan(msl.begin, msl.size());
  const auto dlocal = *dst_l15->page_local_indices;

  std::vector<int64_t> picked;
  if (!src_l15) {  // OFF/ON
    PDKV_RETURN_IF_ERROR(masked(src, dmask, "OFF/ON", out.src_pages));
    PDKV_RETURN_IF_ERROR(masked(dmap, dmask, "OFF/ON", picked));
    PDKV_RETURN_IF_ERROR(gather(dlocal, picked, "OFF/ON", out.dst_pages));
    return out;
  }

  // ON/ON: only pages owned by both sides.
  PDKV_RETURN_IF_ERROR(require_src(*src_l15));
  auto smask = src_l15->page_transfer_mask->first(std::min(n, src_l15->page_transfer_mask->size()));
  dmask = dmask.first(std::min(n, dmask.size()));
  dmap = dmap.first(dmask.size());
  if (smask.size() != dmask.size()) {
    // numpy broadcasts a length-1 mask; with lengths {0, 1} the intersection is empty,
    // any other difference fails (in broadcasting or in the boolean indexing after it).
    if (smask.size() + dmask.size() == 1) return out;
    return invalid_argument("ON/ON: prefill and decode masks differ in length after truncation " +
                            len_text(smask.size(), dmask.size()));
  }
  const auto slocal = *src_l15->page_local_indices;
  size_t common = 0;
  for (size_t i = 0; i < smask.size(); ++i) common += (smask[i] && dmask[i]);
  out.src_pages.reserve(common);
  out.dst_pages.reserve(common);
  int64_t src_rank = -1;  // cumsum(src_mask) - 1 at position i
  for (size_t i = 0; i < smask.size(); ++i) {
    if (smask[i]) ++src_rank;
    if (!(smask[i] && dmask[i])) continue;
    if (static_cast<uint64_t>(src_rank) >= slocal.size()) {
      return out_of_range("ON/ON: prefill local index " + std::to_string(src_rank) +
                          " outside page_local_indices of length " + std::to_string(slocal.size()));
    }
    const int64_t k = dmap[i];
    if (k < 0 || static_cast<uint64_t>(k) >= dlocal.size()) {
      return out_of_range("ON/ON: decode local index " + std::to_string(k) +
                          " outside page_local_indices of length " + std::to_string(dlocal.size()));
    }
    out.src_pages.push_back(slocal[static_cast<size_t>(src_rank)]);
    out.dst_pages.push_back(dlocal[static_cast<size_t>(k)]);
  }
  return out;
}

}  // namespace pdkv::plan
