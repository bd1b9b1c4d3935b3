// Heterogeneous-TP fragment lists on the wire: a u32 count, then fixed 62-byte records.
// Shared by BufferRegistration (where a decode sends its list once) and PreAllocation
// (which may still carry a list of its own).
#include "proto/codec_internal.h"

namespace pdkv::proto::internal {

namespace {

void put_fragment(std::string* b, const Fragment& f) {
  put_u8(b, static_cast<uint8_t>(f.buffer_kind));
  put_u32(b, f.buffer_index);
  put_u32(b, f.src_rank);
  put_u32(b, f.dst_rank);
  put_u64(b, f.src_page_stride_bytes);
  put_u64(b, f.dst_page_stride_bytes);
  put_u64(b, f.src_byte_offset);
  put_u64(b, f.dst_byte_offset);
  put_u64(b, f.bytes_per_page);
  // Fixed-size record: page_count is always 8 bytes, 0 when absent, so the record count
  // check (count x kFragmentWireBytes) is exact.
  put_bool(b, f.page_count.has_value());
  put_u64(b, f.page_count.value_or(0));
}

Fragment read_fragment(WireReader& r) {
  Fragment f;
  f.buffer_kind = read_enum<BufferKind>(r, "fragments.buffer_kind", kMaxBufferKind);
  f.buffer_index = r.u32("fragments.buffer_index");
  f.src_rank = r.u32("fragments.src_rank");
  f.dst_rank = r.u32("fragments.dst_rank");
  f.src_page_stride_bytes = r.u64("fragments.src_page_stride_bytes");
  f.dst_page_stride_bytes = r.u64("fragments.dst_page_stride_bytes");
  f.src_byte_offset = r.u64("fragments.src_byte_offset");
  f.dst_byte_offset = r.u64("fragments.dst_byte_offset");
  f.bytes_per_page = r.u64("fragments.bytes_per_page");
  bool has_count = r.boolean("fragments.page_count");
  uint64_t count = r.u64("fragments.page_count");
  if (has_count) {
    f.page_count = count;
  } else if (count != 0) {
    r.fail("fragments.page_count", "absent but its value bytes are not 0");
  }
  if (r.ok() && f.bytes_per_page == 0) r.fail("fragments.bytes_per_page", "is 0");
  return f;
}

}  // namespace

void put_fragments(std::string* dst, const std::vector<Fragment>& fragments) {
  put_u32(dst, static_cast<uint32_t>(fragments.size()));
  for (const Fragment& f : fragments) put_fragment(dst, f);
}

std::vector<Fragment> read_fragments(WireReader& r) {
  std::vector<Fragment> out;
  const uint32_t n = r.count("fragments", kFragmentWireBytes, kMaxFragments);
  out.reserve(n);
  for (uint32_t i = 0; i < n && r.ok(); ++i) out.push_back(read_fragment(r));
  return out;
}

}  // namespace pdkv::proto::internal
