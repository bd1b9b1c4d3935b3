#include "plan/block_writer.h"

#include <algorithm>

namespace pdkv::plan::internal {
namespace {

// r = a * b + c, false on uint64 overflow.
inline bool mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t& r) {
  uint64_t m;
  if (__builtin_mul_overflow(a, b, &m)) return false;
  return !__builtin_add_overflow(m, c, &r);
}

std::string where(const char* what, size_t index) {
  return std::string(what) + " buffer " + std::to_string(index);
}

// Checks that [ptr + off, ptr + off + len) exists in uint64 and, if has_cap, that
// off + len <= cap. `off` is first_page * stride + byte_offset of the run's last page.
Status check_extent(uint64_t ptr, uint64_t off, uint64_t len, bool has_cap, uint64_t cap,
                    const char* side, const char* what, size_t index) {
  uint64_t end_off, end_addr;
  if (__builtin_add_overflow(off, len, &end_off) ||
      __builtin_add_overflow(ptr, end_off, &end_addr)) {
    return out_of_range(where(what, index) + ": " + side + " address overflows uint64");
  }
  if (has_cap && end_off > cap) {
    return out_of_range(where(what, index) + ": " + side + " block ends at byte " +
                        std::to_string(end_off) + " past the buffer length " + std::to_string(cap));
  }
  return Status();
}

}  // namespace

Status check_table(const BufferTable& t, const char* what) {
  const size_t n = t.src_ptrs.size();
  auto mismatch = [&](const char* name, size_t got) {
    return invalid_argument(std::string(what) + " buffer count mismatch: " + name + " has " +
                            std::to_string(got) + " entries, src_ptrs has " + std::to_string(n));
  };
  if (t.dst_ptrs.size() != n) return mismatch("dst_ptrs", t.dst_ptrs.size());
  if (t.item_lens.size() != n) return mismatch("item_lens", t.item_lens.size());
  if (!t.src_lens.empty() && t.src_lens.size() != n) return mismatch("src_lens", t.src_lens.size());
  if (!t.dst_lens.empty() && t.dst_lens.size() != n) return mismatch("dst_lens", t.dst_lens.size());
  if (!t.src_strides.empty() && t.src_strides.size() != n) {
    return mismatch("src_strides", t.src_strides.size());
  }
  if (!t.dst_strides.empty() && t.dst_strides.size() != n) {
    return mismatch("dst_strides", t.dst_strides.size());
  }
  return Status();
}

BufferSides sides_of(const BufferTable& t, size_t index) {
  BufferSides b;
  b.src_ptr = t.src_ptrs[index];
  b.dst_ptr = t.dst_ptrs[index];
  b.item_len = t.item_lens[index];
  b.src_stride =
      t.src_strides.empty() || t.src_strides[index] == 0 ? b.item_len : t.src_strides[index];
  b.dst_stride =
      t.dst_strides.empty() || t.dst_strides[index] == 0 ? b.item_len : t.dst_strides[index];
  b.has_src_len = !t.src_lens.empty();
  b.has_dst_len = !t.dst_lens.empty();
  if (b.has_src_len) b.src_len = t.src_lens[index];
  if (b.has_dst_len) b.dst_len = t.dst_lens[index];
  return b;
}

Result<RunExtent> check_runs(std::span<const PageRun> runs) {
  RunExtent x;
  for (const PageRun& r : runs) {
    if (r.src_first < 0 || r.dst_first < 0) {
      return out_of_range("negative page index " +
                          std::to_string(r.src_first < 0 ? r.src_first : r.dst_first));
    }
    // first + count cannot overflow: count pages followed first in an int64 list.
    x.src_end_page = std::max(x.src_end_page, static_cast<uint64_t>(r.src_first + r.count));
    x.dst_end_page = std::max(x.dst_end_page, static_cast<uint64_t>(r.dst_first + r.count));
  }
  return x;
}

Status emit_default(const BufferSides& b, std::span<const PageRun> runs, RunExtent extent,
                    BlockWriter& w, const char* what, size_t index) {
  if (runs.empty()) return Status();
  const uint64_t item = b.item_len;
  if (b.src_stride < item || b.dst_stride < item) {
    // Whole items step by the strides: a smaller stride would overlap the next page.
    return invalid_argument(where(what, index) + ": page stride " +
                            std::to_string(std::min(b.src_stride, b.dst_stride)) +
                            " is smaller than its item of " + std::to_string(item) + " bytes");
  }
  if (b.src_stride != item || b.dst_stride != item) {
    // Strided pages: the last page's block is the furthest one on each side.
    uint64_t src_off, dst_off;
    if (!mul_add(extent.src_end_page - 1, b.src_stride, 0, src_off) ||
        !mul_add(extent.dst_end_page - 1, b.dst_stride, 0, dst_off)) {
      return out_of_range(where(what, index) + ": page offset overflows uint64");
    }
    PDKV_RETURN_IF_ERROR(
        check_extent(b.src_ptr, src_off, item, b.has_src_len, b.src_len, "source", what, index));
    PDKV_RETURN_IF_ERROR(check_extent(b.dst_ptr, dst_off, item, b.has_dst_len, b.dst_len,
                                      "destination", what, index));
    for (const PageRun& r : runs) {
      uint64_t src = b.src_ptr + static_cast<uint64_t>(r.src_first) * b.src_stride;
      uint64_t dst = b.dst_ptr + static_cast<uint64_t>(r.dst_first) * b.dst_stride;
      for (int64_t k = 0; k < r.count; ++k) {
        w.add(src, dst, item);  // merges only where both sides happen to be packed
        src += b.src_stride;
        dst += b.dst_stride;
      }
    }
    return Status();
  }
  uint64_t src_end, dst_end;
  if (!mul_add(extent.src_end_page, b.item_len, 0, src_end) ||
      !mul_add(extent.dst_end_page, b.item_len, 0, dst_end)) {
    return out_of_range(where(what, index) + ": page offset overflows uint64");
  }
  PDKV_RETURN_IF_ERROR(
      check_extent(b.src_ptr, src_end, 0, b.has_src_len, b.src_len, "source", what, index));
  PDKV_RETURN_IF_ERROR(
      check_extent(b.dst_ptr, dst_end, 0, b.has_dst_len, b.dst_len, "destination", what, index));
  auto block = [&](const PageRun& r, auto add) {
    add(b.src_ptr + static_cast<uint64_t>(r.src_first) * item,
        b.dst_ptr + static_cast<uint64_t>(r.dst_first) * item,
        static_cast<uint64_t>(r.count) * item);
  };
  auto merged = [&](uint64_t s, uint64_t d, uint64_t n) { w.add(s, d, n); };
  auto plain = [&](uint64_t s, uint64_t d, uint64_t n) { w.add_unmerged(s, d, n); };
  // Runs are maximal, so with item_len > 0 a run never continues the previous run of the
  // same buffer: only the first one may merge (into the previous buffer's last block).
  block(runs.front(), merged);
  for (const PageRun& r : runs.subspan(1)) {
    if (item == 0) {
      block(r, merged);
    } else {
      block(r, plain);
    }
  }
  return Status();
}

uint64_t default_block_bound(const BufferSides& b, std::span<const PageRun> runs,
                             uint64_t total_pages) {
  const bool strided = b.src_stride != b.item_len || b.dst_stride != b.item_len;
  return strided ? total_pages : runs.size();
}

namespace {

// Checks the block of page `src_last`/`dst_last` (the highest one of what is checked).
Status check_fragment_page(const BufferSides& b, const Fragment& f, uint64_t src_last,
                           uint64_t dst_last, const char* what, size_t index) {
  uint64_t src_off, dst_off;
  if (!mul_add(src_last, f.src_page_stride_bytes, f.src_byte_offset, src_off) ||
      !mul_add(dst_last, f.dst_page_stride_bytes, f.dst_byte_offset, dst_off)) {
    return out_of_range(where(what, index) + ": fragment offset overflows uint64");
  }
  PDKV_RETURN_IF_ERROR(check_extent(b.src_ptr, src_off, f.bytes_per_page, b.has_src_len, b.src_len,
                                    "source", what, index));
  return check_extent(b.dst_ptr, dst_off, f.bytes_per_page, b.has_dst_len, b.dst_len, "destination",
                      what, index);
}

}  // namespace

Status emit_fragment(const BufferSides& b, const Fragment& f, std::span<const PageRun> runs,
                     RunExtent extent, BlockWriter& w, const char* what, size_t index) {
  if (runs.empty()) return Status();
  if (!f.page_count) {
    PDKV_RETURN_IF_ERROR(
        check_fragment_page(b, f, extent.src_end_page - 1, extent.dst_end_page - 1, what, index));
  }
  for (const PageRun& r : runs) {
    uint64_t pages = static_cast<uint64_t>(r.count);
    if (f.page_count) {
      pages = std::min(pages, *f.page_count);
      if (pages == 0) continue;
      PDKV_RETURN_IF_ERROR(check_fragment_page(b, f, static_cast<uint64_t>(r.src_first) + pages - 1,
                                               static_cast<uint64_t>(r.dst_first) + pages - 1, what,
                                               index));
    }
    uint64_t src = b.src_ptr + static_cast<uint64_t>(r.src_first) * f.src_page_stride_bytes +
                   f.src_byte_offset;
    uint64_t dst = b.dst_ptr + static_cast<uint64_t>(r.dst_first) * f.dst_page_stride_bytes +
                   f.dst_byte_offset;
    for (uint64_t k = 0; k < pages; ++k) {
      w.add(src, dst, f.bytes_per_page);
      src += f.src_page_stride_bytes;
      dst += f.dst_page_stride_bytes;
    }
  }
  return Status();
}

uint64_t fragment_block_bound(const Fragment& f, std::span<const PageRun> runs,
                              uint64_t total_pages) {
  if (!f.page_count) return total_pages;
  uint64_t n = 0;
  for (const PageRun& r : runs) n += std::min(static_cast<uint64_t>(r.count), *f.page_count);
  return n;
}

Result<FragmentIndex> index_fragments(std::span<const Fragment> fragments, bool state,
                                      size_t buffer_count) {
  FragmentIndex idx;
  idx.begin.assign(buffer_count + 1, 0);
  for (const Fragment& f : fragments) {
    if (is_state_kind(f.kind) != state) continue;
    if (f.buffer_index < 0 || static_cast<uint64_t>(f.buffer_index) >= buffer_count) {
      return out_of_range(std::string(state ? "state" : "kv") + " fragment buffer_index " +
                          std::to_string(f.buffer_index) + " outside the " +
                          std::to_string(buffer_count) + " buffers");
    }
    ++idx.begin[static_cast<size_t>(f.buffer_index) + 1];
    ++idx.selected;
  }
  for (size_t b = 0; b < buffer_count; ++b) idx.begin[b + 1] += idx.begin[b];
  idx.order.resize(idx.selected);
  std::vector<uint32_t> fill(idx.begin.begin(), idx.begin.end() - 1);
  for (size_t i = 0; i < fragments.size(); ++i) {
    const Fragment& f = fragments[i];
    if (is_state_kind(f.kind) != state) continue;
    idx.order[fill[static_cast<size_t>(f.buffer_index)]++] = static_cast<uint32_t>(i);
  }
  return idx;
}

}  // namespace pdkv::plan::internal
