// PreAllocation: decode -> prefill, the destination pages of one room.
#include <fmt/format.h>

#include "proto/codec_internal.h"

namespace pdkv::proto {
using namespace internal;  // NOLINT

Multipart encode(const PreAllocation& m) {
  std::string b;
  b.reserve(256 + 8 * (m.dst_kv_pages.size() + m.state_slots.size()) +
            4 * m.state_slot_group_ends.size() + kFragmentWireBytes * m.fragments.size());
  put_u64(&b, m.room);
  put_identity(&b, m.decode);
  put_u8(&b, static_cast<uint8_t>(m.kind));
  put_array<int64_t>(&b, m.dst_kv_pages);
  put_optional(&b, m.aux_index);
  put_array<int64_t>(&b, m.state_slots);
  put_array<uint32_t>(&b, m.state_slot_group_ends);
  put_bool(&b, m.copy_state_buffers);
  put_u32(&b, m.required_dst_info_num);
  put_u64(&b, m.decode_prefix_len);
  put_u64(&b, m.write_grant);
  put_u64(&b, m.ticket);
  put_u64(&b, m.registration_challenge);
  put_bool(&b, m.dst_l1_5.has_value());
  if (m.dst_l1_5) {
    put_bool(&b, m.dst_l1_5->indices_are_local);
    put_bool_array(&b, m.dst_l1_5->page_transfer_mask);
    put_array<int64_t>(&b, m.dst_l1_5->page_local_indices);
  }
  put_bool(&b, m.fragments_from_registration);
  put_fragments(&b, m.fragments);
  return frame(MessageType::kPreAllocation, std::move(b));
}

Result<PreAllocation> decode_pre_allocation(FrameViews frames) {
  PDKV_ASSIGN_OR_RETURN(std::string_view body, body_of(frames, MessageType::kPreAllocation));
  WireReader r("PreAllocation", body);
  PreAllocation m;
  m.room = r.u64("room");
  m.decode = read_identity(r);
  m.kind = read_enum<PreAllocKind>(r, "kind", kMaxPreAllocKind);
  m.dst_kv_pages = r.array<int64_t>("dst_kv_pages", kMaxPages);
  m.aux_index = read_optional<int64_t>(r, "aux_index");
  m.state_slots = r.array<int64_t>("state_slots", kMaxPages);
  m.state_slot_group_ends = r.array<uint32_t>("state_slot_group_ends", kMaxStateGroups);
  m.copy_state_buffers = r.boolean("copy_state_buffers");
  m.required_dst_info_num = r.u32("required_dst_info_num");
  m.decode_prefix_len = r.u64("decode_prefix_len");
  m.write_grant = r.u64("write_grant");
  m.ticket = r.u64("ticket");
  m.registration_challenge = r.u64("registration_challenge");
  if (r.boolean("dst_l1_5")) {
    PageOwnership o;
    o.indices_are_local = r.boolean("dst_l1_5.indices_are_local");
    o.page_transfer_mask = r.bool_array("dst_l1_5.page_transfer_mask", kMaxPages);
    o.page_local_indices = r.array<int64_t>("dst_l1_5.page_local_indices", kMaxPages);
    m.dst_l1_5 = std::move(o);
  }
  m.fragments_from_registration = r.boolean("fragments_from_registration");
  m.fragments = read_fragments(r);
  if (!r.ok()) return r.finish();

  // Semantic checks a prefill would otherwise have to repeat before indexing with these.
  for (int64_t page : m.dst_kv_pages) {
    if (page < 0) {
      r.fail("dst_kv_pages", fmt::format("negative page index {}", page));
      break;
    }
  }
  if (m.aux_index && *m.aux_index < 0) r.fail("aux_index", "is negative");
  // Group ends: monotone, each inside the list, the last one its end.
  uint32_t previous_end = 0;
  for (uint32_t end : m.state_slot_group_ends) {
    if (end < previous_end || end > m.state_slots.size()) {
      r.fail("state_slot_group_ends",
             fmt::format("end {} after {} is not monotone inside the {} slots", end, previous_end,
                         m.state_slots.size()));
      break;
    }
    previous_end = end;
  }
  if (!m.state_slot_group_ends.empty() && previous_end != m.state_slots.size()) {
    r.fail("state_slot_group_ends", fmt::format("the last group ends at {}, not at the {} slots",
                                                previous_end, m.state_slots.size()));
  }
  if (m.required_dst_info_num == 0) r.fail("required_dst_info_num", "is 0");
  if (m.kind != PreAllocKind::kTransfer &&
      (!m.dst_kv_pages.empty() || !m.state_slots.empty() || !m.fragments.empty() ||
       m.fragments_from_registration || m.copy_state_buffers || !m.state_slot_group_ends.empty())) {
    r.fail("kind", "a dummy or nothing-needed pre-allocation carries pages, slots or fragments");
  }
  if (m.fragments_from_registration && !m.fragments.empty()) {
    r.fail("fragments", "carried although the pre-allocation names its registration's");
  }
  if (m.dst_l1_5) {
    size_t owned = 0;
    for (bool b : m.dst_l1_5->page_transfer_mask) owned += b ? 1 : 0;
    if (owned != m.dst_l1_5->page_local_indices.size()) {
      r.fail("dst_l1_5.page_local_indices",
             fmt::format("{} local indices for {} owned pages in the mask",
                         m.dst_l1_5->page_local_indices.size(), owned));
    }
  }
  PDKV_RETURN_IF_ERROR(r.finish());
  return m;
}

}  // namespace pdkv::proto
