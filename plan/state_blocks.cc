#include "plan/state_blocks.h"

#include <limits>
#include <string>

#include "plan/block_writer.h"
#include "plan/coalesce.h"
#include "plan/slot_pairs.h"

namespace pdkv::plan {

using internal::BlockWriter;

Result<std::vector<Block>> state_blocks(const BufferTable& buffers, const StateSlots& slots,
                                        std::span<const Fragment> fragments) {
  std::vector<Block> out;
  if (buffers.src_ptrs.empty() || buffers.dst_ptrs.empty() || !slots.src_slots ||
      !slots.dst_slots) {
    return out;
  }
  PDKV_RETURN_IF_ERROR(internal::check_table(buffers, "state"));
  const size_t nbuf = buffers.src_ptrs.size();
  const auto src = *slots.src_slots;
  const auto dst = *slots.dst_slots;
  if (src.size() != dst.size() && !(src.size() == 1 && dst.size() > 1)) {
    return invalid_argument("state slot count mismatch: " + std::to_string(src.size()) +
                            " source vs " + std::to_string(dst.size()) + " destination slots");
  }
  if (!slots.buffer_groups.empty() && slots.buffer_groups.size() != nbuf) {
    return invalid_argument("buffer_groups has " + std::to_string(slots.buffer_groups.size()) +
                            " entries for " + std::to_string(nbuf) + " state buffers");
  }

  // Which state buffers take part (all of them without a layer range).
  std::vector<uint8_t> selected(nbuf, 1);
  size_t in_group = nbuf;
  if (!slots.buffer_groups.empty()) {
    in_group = 0;
    for (size_t s = 0; s < nbuf; ++s) {
      selected[s] = slots.buffer_groups[s] == slots.group;
      in_group += selected[s];
    }
    if (in_group == 0) return out;
  }
  if (slots.begin_layer || slots.end_layer) {
    const int64_t begin = slots.begin_layer.value_or(0);
    const int64_t end = slots.end_layer.value_or(std::numeric_limits<int64_t>::max());
    const size_t ids = slots.state_layer_ids ? slots.state_layer_ids->size() : 0;
    if (ids != nbuf) {
      return invalid_argument("state_layer_ids has " + std::to_string(ids) + " ids for " +
                              std::to_string(nbuf) + " state buffers");
    }
    size_t kept = 0;
    for (size_t s = 0; s < nbuf; ++s) {
      const int64_t id = (*slots.state_layer_ids)[s];
      selected[s] = selected[s] && begin <= id && id < end;
      kept += selected[s];
    }
    if (kept == 0) return out;
  }

  std::vector<int64_t> src_valid, dst_valid;
  PDKV_RETURN_IF_ERROR(pair_slots(src, dst, src_valid, dst_valid));
  if (src_valid.empty()) return out;
  std::vector<PageRun> runs;
  PDKV_RETURN_IF_ERROR(coalesce_into(src_valid, dst_valid, runs));
  PDKV_ASSIGN_OR_RETURN(const auto extent, internal::check_runs(runs));

  PDKV_ASSIGN_OR_RETURN(auto idx, internal::index_fragments(fragments, true, nbuf));
  const bool has_state_fragment_plan = idx.selected > 0;
  uint64_t bound = 0;
  for (size_t s = 0; s < nbuf; ++s) {
    if (!selected[s]) continue;
    if (!has_state_fragment_plan) {
      bound +=
          internal::default_block_bound(internal::sides_of(buffers, s), runs, src_valid.size());
      continue;
    }
    for (uint32_t k = idx.begin[s]; k < idx.begin[s + 1]; ++k) {
      bound += internal::fragment_block_bound(fragments[idx.order[k]], runs, src_valid.size());
    }
  }
  out.resize(bound);  // one allocation for the whole call
  BlockWriter writer(out.data());
  for (size_t s = 0; s < nbuf; ++s) {
    if (!selected[s]) continue;
    const auto sides = internal::sides_of(buffers, s);
    if (!has_state_fragment_plan) {
      PDKV_RETURN_IF_ERROR(internal::emit_default(sides, runs, extent, writer, "state", s));
      continue;
    }
    for (uint32_t k = idx.begin[s]; k < idx.begin[s + 1]; ++k) {
      PDKV_RETURN_IF_ERROR(internal::emit_fragment(sides, fragments[idx.order[k]], runs, extent,
                                                   writer, "state", s));
    }
  }
  out.resize(writer.size());
  return out;
}

}  // namespace pdkv::plan
