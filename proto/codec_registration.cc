// BufferRegistration: decode -> prefill, the decode rank's buffers and layout.
#include <fmt/format.h>

#include "proto/codec_internal.h"

namespace pdkv::proto {
using namespace internal;  // NOLINT

namespace {

void put_buffer_set(std::string* b, const BufferSet& s) {
  put_array<uint64_t>(b, s.ptrs);
  put_array<uint64_t>(b, s.lens);
  put_array<uint64_t>(b, s.item_lens);
}

BufferSet read_buffer_set(WireReader& r, std::string_view name) {
  BufferSet s;
  std::string prefix(name);
  s.ptrs = r.array<uint64_t>(prefix + ".ptrs", kMaxBuffers);
  s.lens = r.array<uint64_t>(prefix + ".lens", kMaxBuffers);
  s.item_lens = r.array<uint64_t>(prefix + ".item_lens", kMaxBuffers);
  if (!r.ok()) return s;
  if (s.lens.size() != s.ptrs.size() || s.item_lens.size() != s.ptrs.size()) {
    r.fail(prefix, fmt::format("{} ptrs, {} lens and {} item_lens differ in count", s.ptrs.size(),
                               s.lens.size(), s.item_lens.size()));
    return s;
  }
  for (size_t i = 0; i < s.ptrs.size(); ++i) {
    // A region that wraps the address space cannot be bounds-checked later.
    if (s.lens[i] > UINT64_MAX - s.ptrs[i]) {
      r.fail(prefix, fmt::format("buffer {} wraps the address space", i));
      return s;
    }
    if (s.item_lens[i] > s.lens[i]) {
      r.fail(prefix, fmt::format("buffer {}: item_len {} exceeds its length {}", i, s.item_lens[i],
                                 s.lens[i]));
      return s;
    }
  }
  return s;
}

void put_layout(std::string* b, const KvLayout& l) {
  put_u32(b, l.page_size);
  put_u32(b, l.kv_head_num);
  put_u32(b, l.total_kv_head_num);
  put_u32(b, l.head_dim);
  put_u32(b, l.dtype_bytes);
  put_u8(b, static_cast<uint8_t>(l.page_layout));
  put_bool(b, l.is_mla);
  put_u32(b, static_cast<uint32_t>(l.layer_buffers.size()));
  for (const auto& layer : l.layer_buffers) put_array<uint32_t>(b, layer);
  put_array<int32_t>(b, l.kv_layer_ids);
  put_u32(b, l.target_layer_num);
  put_u32(b, l.draft_kv_head_num);
  put_u32(b, l.draft_total_kv_head_num);
  put_u32(b, l.draft_head_dim);
  put_array<int32_t>(b, l.state_buffer_groups);
  put_array<int32_t>(b, l.kv_layer_groups);
}

KvLayout read_layout(WireReader& r) {
  KvLayout l;
  l.page_size = r.u32("layout.page_size");
  l.kv_head_num = r.u32("layout.kv_head_num");
  l.total_kv_head_num = r.u32("layout.total_kv_head_num");
  l.head_dim = r.u32("layout.head_dim");
  l.dtype_bytes = r.u32("layout.dtype_bytes");
  l.page_layout = read_enum<PageLayout>(r, "layout.page_layout", kMaxPageLayout);
  l.is_mla = r.boolean("layout.is_mla");
  // Each layer costs at least its 4-byte count, which bounds the outer vector.
  uint32_t layers = r.count("layout.layer_buffers", 4, kMaxLayers);
  l.layer_buffers.reserve(layers);
  for (uint32_t i = 0; i < layers && r.ok(); ++i) {
    l.layer_buffers.push_back(r.array<uint32_t>("layout.layer_buffers[]", kMaxBuffersPerLayer));
  }
  l.kv_layer_ids = r.array<int32_t>("layout.kv_layer_ids", kMaxLayers);
  l.target_layer_num = r.u32("layout.target_layer_num");
  l.draft_kv_head_num = r.u32("layout.draft_kv_head_num");
  l.draft_total_kv_head_num = r.u32("layout.draft_total_kv_head_num");
  l.draft_head_dim = r.u32("layout.draft_head_dim");
  l.state_buffer_groups = r.array<int32_t>("layout.state_buffer_groups", kMaxBuffers);
  l.kv_layer_groups = r.array<int32_t>("layout.kv_layer_groups", kMaxLayers);
  if (!r.ok()) return l;
  for (int32_t g : l.state_buffer_groups) {
    if (g < 0 || static_cast<size_t>(g) >= kMaxStateGroups) {
      r.fail("layout.state_buffer_groups",
             fmt::format("group {} outside [0, {})", g, kMaxStateGroups));
      return l;
    }
  }
  for (int32_t g : l.kv_layer_groups) {
    if (g < -1 || g >= static_cast<int32_t>(kMaxStateGroups)) {
      r.fail("layout.kv_layer_groups",
             fmt::format("group {} outside [-1, {})", g, kMaxStateGroups));
      return l;
    }
  }
  if (!l.kv_layer_groups.empty() && l.kv_layer_groups.size() != l.layer_buffers.size()) {
    r.fail("layout.kv_layer_groups", fmt::format("{} groups for {} layers",
                                                 l.kv_layer_groups.size(), l.layer_buffers.size()));
  }
  if (l.target_layer_num > l.layer_buffers.size()) {
    r.fail("layout.target_layer_num",
           fmt::format("{} exceeds the {} KV layers", l.target_layer_num, l.layer_buffers.size()));
  }
  if (l.draft_kv_head_num > l.draft_total_kv_head_num && l.draft_total_kv_head_num != 0) {
    r.fail("layout.draft_kv_head_num", fmt::format("{} exceeds draft_total_kv_head_num {}",
                                                   l.draft_kv_head_num, l.draft_total_kv_head_num));
  }
  if (l.page_size == 0) r.fail("layout.page_size", "is 0");
  if (l.kv_head_num > l.total_kv_head_num) {
    r.fail("layout.kv_head_num",
           fmt::format("{} exceeds total_kv_head_num {}", l.kv_head_num, l.total_kv_head_num));
  }
  if (!l.kv_layer_ids.empty() && l.kv_layer_ids.size() != l.layer_buffers.size()) {
    r.fail("layout.kv_layer_ids",
           fmt::format("{} ids for {} layers", l.kv_layer_ids.size(), l.layer_buffers.size()));
  }
  return l;
}

// Page strides of a buffer set: none, or one per buffer, each 0 (packed) or at least the
// item (a smaller stride would make pages overlap).
void check_strides(WireReader& r, const char* field, const std::vector<uint64_t>& strides,
                   const BufferSet& set) {
  if (!r.ok() || strides.empty()) return;
  if (strides.size() != set.ptrs.size()) {
    r.fail(field, fmt::format("{} strides for {} buffers", strides.size(), set.ptrs.size()));
    return;
  }
  for (size_t i = 0; i < strides.size(); ++i) {
    if (strides[i] != 0 && strides[i] < set.item_lens[i]) {
      r.fail(field, fmt::format("buffer {}: stride {} below its item of {} bytes", i, strides[i],
                                set.item_lens[i]));
      return;
    }
  }
}

}  // namespace

Multipart encode(const BufferRegistration& m) {
  std::string b;
  put_identity(&b, m.decode);
  put_layout(&b, m.layout);
  put_buffer_set(&b, m.kv);
  put_buffer_set(&b, m.aux);
  put_buffer_set(&b, m.state);
  put_array<int32_t>(&b, m.state_layer_ids);
  put_bool(&b, m.enable_mla_l1_5_cache);
  put_u64(&b, m.decode_prefix_len);
  put_bytes(&b, m.memory_descriptor);
  put_fragments(&b, m.fragments);
  put_array<uint64_t>(&b, m.kv_page_strides);
  put_array<uint64_t>(&b, m.state_page_strides);
  return frame(MessageType::kBufferRegistration, std::move(b));
}

Result<BufferRegistration> decode_buffer_registration(FrameViews frames) {
  PDKV_ASSIGN_OR_RETURN(std::string_view body, body_of(frames, MessageType::kBufferRegistration));
  WireReader r("BufferRegistration", body);
  BufferRegistration m;
  m.decode = read_identity(r);
  m.layout = read_layout(r);
  m.kv = read_buffer_set(r, "kv");
  m.aux = read_buffer_set(r, "aux");
  m.state = read_buffer_set(r, "state");
  m.state_layer_ids = r.array<int32_t>("state_layer_ids", kMaxBuffers);
  m.enable_mla_l1_5_cache = r.boolean("enable_mla_l1_5_cache");
  m.decode_prefix_len = r.u64("decode_prefix_len");
  m.memory_descriptor = r.bytes("memory_descriptor", kMaxDescriptorBytes);
  m.fragments = read_fragments(r);
  m.kv_page_strides = r.array<uint64_t>("kv_page_strides", kMaxBuffers);
  check_strides(r, "kv_page_strides", m.kv_page_strides, m.kv);
  m.state_page_strides = r.array<uint64_t>("state_page_strides", kMaxBuffers);
  check_strides(r, "state_page_strides", m.state_page_strides, m.state);
  if (r.ok() && !m.layout.state_buffer_groups.empty() &&
      m.layout.state_buffer_groups.size() != m.state.ptrs.size()) {
    r.fail("layout.state_buffer_groups",
           fmt::format("{} groups for {} state buffers", m.layout.state_buffer_groups.size(),
                       m.state.ptrs.size()));
  }
  if (r.ok()) {
    for (const auto& layer : m.layout.layer_buffers) {
      for (uint32_t idx : layer) {
        if (idx >= m.kv.ptrs.size()) {
          r.fail("layout.layer_buffers",
                 fmt::format("buffer index {} but only {} KV buffers", idx, m.kv.ptrs.size()));
          break;
        }
      }
      if (!r.ok()) break;
    }
  }
  if (r.ok() && !m.state_layer_ids.empty() && m.state_layer_ids.size() != m.state.ptrs.size()) {
    r.fail("state_layer_ids", fmt::format("{} ids for {} state buffers", m.state_layer_ids.size(),
                                          m.state.ptrs.size()));
  }
  PDKV_RETURN_IF_ERROR(r.finish());
  return m;
}

}  // namespace pdkv::proto
