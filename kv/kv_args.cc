#include "kv/kv_args.h"

#include <algorithm>
#include <limits>
#include <string>

#include "kv/route/stage_address.h"

namespace pdkv::kv {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

Status check_buffer_set(const char* name, const std::vector<uint64_t>& ptrs,
                        const std::vector<uint64_t>& lens, const std::vector<uint64_t>& items,
                        bool items_required_nonzero) {
  if (ptrs.size() != lens.size() || ptrs.size() != items.size()) {
    return invalid_argument(std::string(name) + "_data_ptrs/_data_lens/_item_lens have lengths " +
                            std::to_string(ptrs.size()) + "/" + std::to_string(lens.size()) + "/" +
                            std::to_string(items.size()) + "; they must be equal");
  }
  for (size_t i = 0; i < ptrs.size(); ++i) {
    if (ptrs[i] > std::numeric_limits<uint64_t>::max() - lens[i]) {
      return invalid_argument(std::string(name) + " buffer " + std::to_string(i) +
                              ": pointer + length overflows");
    }
    if (items_required_nonzero && items[i] == 0) {
      return invalid_argument(std::string(name) + "_item_lens[" + std::to_string(i) +
                              "] is 0; an item must have at least one byte");
    }
    if (items[i] > lens[i]) {
      return invalid_argument(std::string(name) + " buffer " + std::to_string(i) +
                              ": item length " + std::to_string(items[i]) +
                              " exceeds buffer length " + std::to_string(lens[i]));
    }
  }
  return Status();
}

// Per-buffer memory overrides: none, or one per buffer.
Status check_memory_list(const char* name, const std::vector<BufferMemory>& memory,
                         size_t buffers) {
  if (!memory.empty() && memory.size() != buffers) {
    return invalid_argument(std::string(name) + "_data_memory has " +
                            std::to_string(memory.size()) + " entries for " +
                            std::to_string(buffers) + " buffers");
  }
  for (size_t i = 0; i < memory.size(); ++i) {
    if (memory[i].device < -1) {
      return invalid_argument(std::string(name) + " buffer " + std::to_string(i) +
                              ": device must be >= -1, got " + str(memory[i].device));
    }
  }
  return Status();
}

// State groups: one group per state buffer / KV layer when given, within the wire's
// bound; strides at least the item. A KV buffer may serve layers of several groups
// (vLLM's hybrid allocator shares one tensor between a layer of each group; the grant
// opens each group's pages of it), each layer reading it through its own group's list.
Status check_state_groups(const KvArgs& a) {
  const auto max_group = static_cast<int64_t>(proto::kMaxStateGroups);
  if (!a.state_buffer_groups.empty() && a.state_buffer_groups.size() != a.state_data_ptrs.size()) {
    return invalid_argument(
        "state_buffer_groups has " + std::to_string(a.state_buffer_groups.size()) +
        " entries but there are " + std::to_string(a.state_data_ptrs.size()) + " state buffers");
  }
  for (int64_t g : a.state_buffer_groups) {
    if (g < 0 || g >= max_group) {
      return invalid_argument("state_buffer_groups holds " + str(g) + "; a state group is in [0, " +
                              str(max_group) + ")");
    }
  }
  if (!a.kv_layer_groups.empty() && a.kv_layer_groups.size() != a.layer_buffers.size()) {
    return invalid_argument("kv_layer_groups has " + std::to_string(a.kv_layer_groups.size()) +
                            " entries but layer_buffers has " +
                            std::to_string(a.layer_buffers.size()) + " KV layers");
  }
  for (int64_t g : a.kv_layer_groups) {
    if (g < -1 || g >= max_group) {
      return invalid_argument("kv_layer_groups holds " + str(g) +
                              "; -1 = chunked pages, else a state group in [0, " + str(max_group) +
                              ")");
    }
  }
  if (a.pp_size < 1 || a.pp_size > kMaxPipelineStages) {
    return invalid_argument("pp_size must be in [1, " + str(kMaxPipelineStages) + "], got " +
                            str(a.pp_size));
  }
  if (a.pp_rank < 0 || a.pp_rank >= a.pp_size) {
    return invalid_argument("pp_rank " + str(a.pp_rank) + " is not a stage of pp_size " +
                            str(a.pp_size));
  }
  for (size_t i = 0; i < a.window_state_groups.size(); ++i) {
    const int64_t g = a.window_state_groups[i];
    if (g < 0 || g >= a.state_group_count()) {
      return invalid_argument("window_state_groups holds " + str(g) + "; this rank has " +
                              str(a.state_group_count()) + " state groups");
    }
    if (std::find(a.window_state_groups.begin(), a.window_state_groups.begin() + i, g) !=
        a.window_state_groups.begin() + i) {
      return invalid_argument("window_state_groups names group " + str(g) + " twice");
    }
  }
  if (!a.kv_page_strides.empty() && a.kv_page_strides.size() != a.kv_data_ptrs.size()) {
    return invalid_argument("kv_page_strides has " + std::to_string(a.kv_page_strides.size()) +
                            " entries but there are " + std::to_string(a.kv_data_ptrs.size()) +
                            " KV buffers");
  }
  if (!a.state_page_strides.empty() && a.state_page_strides.size() != a.state_data_ptrs.size()) {
    return invalid_argument(
        "state_page_strides has " + std::to_string(a.state_page_strides.size()) +
        " entries but there are " + std::to_string(a.state_data_ptrs.size()) + " state buffers");
  }
  for (size_t s = 0; s < a.state_page_strides.size(); ++s) {
    const uint64_t stride = a.state_page_strides[s];
    if (stride != 0 && stride < a.state_item_lens[s]) {
      return invalid_argument("state_page_strides[" + std::to_string(s) +
                              "] = " + std::to_string(stride) + " is below the item length " +
                              std::to_string(a.state_item_lens[s]) + " (0 = packed slots)");
    }
  }
  for (size_t b = 0; b < a.kv_page_strides.size(); ++b) {
    const uint64_t stride = a.kv_page_strides[b];
    if (stride != 0 && stride < a.kv_item_lens[b]) {
      return invalid_argument("kv_page_strides[" + std::to_string(b) +
                              "] = " + std::to_string(stride) + " is below the item length " +
                              std::to_string(a.kv_item_lens[b]) + " (0 = packed pages)");
    }
  }
  return Status();
}

}  // namespace

std::vector<int64_t> KvArgs::effective_kv_layer_ids() const {
  if (!kv_layer_ids.empty()) return kv_layer_ids;
  std::vector<int64_t> ids(layer_buffers.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  return ids;
}

int64_t KvArgs::layer_num() const {
  int64_t top = -1;
  for (int64_t id : kv_layer_ids) top = std::max(top, id);
  for (int64_t id : state_layer_ids) top = std::max(top, id);
  return top >= 0 ? top + 1 : static_cast<int64_t>(layer_buffers.size());
}

int64_t KvArgs::state_group_count() const {
  int64_t top = -1;
  for (int64_t g : state_buffer_groups) top = std::max(top, g);
  for (int64_t g : kv_layer_groups) top = std::max(top, g);
  if (top < 0 && !state_data_ptrs.empty()) return 1;
  return top + 1;
}

bool KvArgs::has_group_kv_layers() const {
  return std::any_of(kv_layer_groups.begin(), kv_layer_groups.end(),
                     [](int64_t g) { return g >= 0; });
}

Status KvArgs::validate() const {
  if (tp_size < 1) return invalid_argument("tp_size must be >= 1, got " + str(tp_size));
  if (dp_size < 1) return invalid_argument("dp_size must be >= 1, got " + str(dp_size));
  if (engine_rank < 0 || engine_rank >= world_size()) {
    return invalid_argument("engine_rank " + str(engine_rank) +
                            " outside [0, tp_size*dp_size=" + str(world_size()) + ")");
  }
  if (page_size < 1) return invalid_argument("page_size must be >= 1, got " + str(page_size));
  PDKV_RETURN_IF_ERROR(check_buffer_set("kv", kv_data_ptrs, kv_data_lens, kv_item_lens, true));
  PDKV_RETURN_IF_ERROR(check_buffer_set("aux", aux_data_ptrs, aux_data_lens, aux_item_lens, true));
  PDKV_RETURN_IF_ERROR(
      check_buffer_set("state", state_data_ptrs, state_data_lens, state_item_lens, true));
  PDKV_RETURN_IF_ERROR(check_memory_list("kv", kv_data_memory, kv_data_ptrs.size()));
  PDKV_RETURN_IF_ERROR(check_memory_list("aux", aux_data_memory, aux_data_ptrs.size()));
  PDKV_RETURN_IF_ERROR(check_memory_list("state", state_data_memory, state_data_ptrs.size()));
  if (gpu_id < -1) return invalid_argument("gpu_id must be >= -1 (-1 = any), got " + str(gpu_id));
  for (size_t l = 0; l < layer_buffers.size(); ++l) {
    if (layer_buffers[l].empty()) {
      return invalid_argument("layer_buffers[" + std::to_string(l) + "] is empty");
    }
    for (int64_t b : layer_buffers[l]) {
      if (b < 0 || b >= static_cast<int64_t>(kv_data_ptrs.size())) {
        return invalid_argument("layer_buffers[" + std::to_string(l) + "] names buffer " + str(b) +
                                " but there are " + std::to_string(kv_data_ptrs.size()) +
                                " KV buffers");
      }
    }
  }
  if (!kv_layer_ids.empty() && kv_layer_ids.size() != layer_buffers.size()) {
    return invalid_argument("kv_layer_ids has " + std::to_string(kv_layer_ids.size()) +
                            " entries but layer_buffers has " +
                            std::to_string(layer_buffers.size()));
  }
  for (int64_t id : kv_layer_ids) {
    if (id < 0) return invalid_argument("kv_layer_ids contains negative id " + str(id));
  }
  if (!state_layer_ids.empty() && state_layer_ids.size() != state_data_ptrs.size()) {
    return invalid_argument("state_layer_ids has " + std::to_string(state_layer_ids.size()) +
                            " entries but there are " + std::to_string(state_data_ptrs.size()) +
                            " state buffers");
  }
  for (int64_t id : state_layer_ids) {
    if (id < 0) return invalid_argument("state_layer_ids contains negative id " + str(id));
  }
  PDKV_RETURN_IF_ERROR(check_state_groups(*this));
  if (kv_head_num < 1 || total_kv_head_num < 1) {
    return invalid_argument("kv_head_num and total_kv_head_num must be >= 1");
  }
  if (kv_head_num > total_kv_head_num) {
    return invalid_argument("kv_head_num " + str(kv_head_num) + " exceeds total_kv_head_num " +
                            str(total_kv_head_num));
  }
  if (head_dim < 0 || dtype_bytes < 0) {
    return invalid_argument("head_dim and dtype_bytes must be >= 0");
  }
  if (target_layer_num < 0 || target_layer_num > static_cast<int64_t>(layer_buffers.size())) {
    return invalid_argument("target_layer_num " + str(target_layer_num) + " outside [0, " +
                            std::to_string(layer_buffers.size()) + "] (the KV layer count)");
  }
  if (draft_kv_head_num < 0 || draft_total_kv_head_num < 0 || draft_head_dim < 0) {
    return invalid_argument(
        "draft_kv_head_num, draft_total_kv_head_num and draft_head_dim "
        "must be >= 0 (0 = as the target model)");
  }
  if ((draft_kv_head_num != 0 || draft_total_kv_head_num != 0 || draft_head_dim != 0) &&
      (target_layer_num == 0 || target_layer_num == static_cast<int64_t>(layer_buffers.size()))) {
    return invalid_argument(
        "a draft geometry (draft_kv_head_num / draft_total_kv_head_num / draft_head_dim) needs "
        "draft layers: set target_layer_num to the number of target KV layers");
  }
  if (draft_kv_head_num >
      (draft_total_kv_head_num != 0 ? draft_total_kv_head_num : total_kv_head_num)) {
    return invalid_argument("draft_kv_head_num " + str(draft_kv_head_num) +
                            " exceeds the draft model's total KV heads");
  }
  if (is_mla && (kv_head_num != 1 || total_kv_head_num != 1)) {
    return invalid_argument(
        "MLA ranks hold one latent 'head': kv_head_num = total_kv_head_num = 1");
  }
  return Status();
}

proto::KvLayout KvArgs::layout() const {
  proto::KvLayout out;
  out.page_size = static_cast<uint32_t>(page_size);
  out.kv_head_num = static_cast<uint32_t>(kv_head_num);
  out.total_kv_head_num = static_cast<uint32_t>(total_kv_head_num);
  out.head_dim = static_cast<uint32_t>(head_dim);
  out.dtype_bytes = static_cast<uint32_t>(dtype_bytes);
  out.page_layout = page_layout;
  out.is_mla = is_mla;
  out.layer_buffers.reserve(layer_buffers.size());
  for (const auto& l : layer_buffers) {
    out.layer_buffers.emplace_back(l.begin(), l.end());
  }
  out.kv_layer_ids.assign(kv_layer_ids.begin(), kv_layer_ids.end());
  out.target_layer_num = static_cast<uint32_t>(target_layer_num);
  out.draft_kv_head_num = static_cast<uint32_t>(draft_kv_head_num);
  out.draft_total_kv_head_num = static_cast<uint32_t>(draft_total_kv_head_num);
  out.draft_head_dim = static_cast<uint32_t>(draft_head_dim);
  out.state_buffer_groups.assign(state_buffer_groups.begin(), state_buffer_groups.end());
  out.kv_layer_groups.assign(kv_layer_groups.begin(), kv_layer_groups.end());
  return out;
}

namespace {

Status mismatch(const char* field, int64_t prefill, int64_t decode) {
  return invalid_argument(std::string("layout mismatch: ") + field + " is " + str(prefill) +
                          " on prefill but " + str(decode) + " on decode");
}

const char* layout_name(proto::PageLayout l) {
  return l == proto::PageLayout::kNHD ? "NHD" : "HND";
}

// The page geometry both sides must share, whatever their TP sizes.
Status check_geometry(const proto::KvLayout& p, const proto::KvLayout& d) {
  if (p.page_size != d.page_size) return mismatch("page_size", p.page_size, d.page_size);
  if (p.page_layout != d.page_layout) {
    return invalid_argument(std::string("layout mismatch: page_layout is ") +
                            layout_name(p.page_layout) + " on prefill but " +
                            layout_name(d.page_layout) + " on decode");
  }
  if (p.is_mla != d.is_mla) return mismatch("is_mla", p.is_mla, d.is_mla);
  if (p.head_dim != d.head_dim) return mismatch("head_dim", p.head_dim, d.head_dim);
  if (p.dtype_bytes != d.dtype_bytes) return mismatch("dtype_bytes", p.dtype_bytes, d.dtype_bytes);
  if (p.total_kv_head_num != d.total_kv_head_num) {
    return mismatch("total_kv_head_num", p.total_kv_head_num, d.total_kv_head_num);
  }
  if (p.target_layer_num != d.target_layer_num) {
    return mismatch("target_layer_num (draft layers start)", p.target_layer_num,
                    d.target_layer_num);
  }
  if (p.draft_total_kv_head_num != d.draft_total_kv_head_num) {
    return mismatch("draft_total_kv_head_num", p.draft_total_kv_head_num,
                    d.draft_total_kv_head_num);
  }
  if (p.draft_head_dim != d.draft_head_dim) {
    return mismatch("draft_head_dim", p.draft_head_dim, d.draft_head_dim);
  }
  return Status();
}

std::string list_text(const std::vector<int32_t>& v) {
  if (v.empty()) return "[] (default)";
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// Groups compared as given; an empty vector equals its default spelled out, so a side
// that writes [0, 0] for two state buffers matches one that leaves it empty.
bool same_groups(std::vector<int32_t> a, std::vector<int32_t> b, size_t n, int32_t fill) {
  if (a.empty()) a.assign(n, fill);
  if (b.empty()) b.assign(n, fill);
  return a == b;
}

Status check_groups(const KvArgs& p, const proto::KvLayout& pl, const proto::KvLayout& d) {
  if (!same_groups(pl.state_buffer_groups, d.state_buffer_groups, p.state_data_ptrs.size(), 0)) {
    return invalid_argument("layout mismatch: state_buffer_groups is " +
                            list_text(pl.state_buffer_groups) + " on prefill but " +
                            list_text(d.state_buffer_groups) + " on decode");
  }
  if (!same_groups(pl.kv_layer_groups, d.kv_layer_groups, p.layer_buffers.size(), -1)) {
    return invalid_argument("layout mismatch: kv_layer_groups is " + list_text(pl.kv_layer_groups) +
                            " on prefill but " + list_text(d.kv_layer_groups) + " on decode");
  }
  return Status();
}

}  // namespace

Status check_layout_compatible(const KvArgs& p, const proto::KvLayout& d) {
  const proto::KvLayout pl = p.layout();
  PDKV_RETURN_IF_ERROR(check_geometry(pl, d));
  if (p.layer_buffers.size() != d.layer_buffers.size()) {
    return mismatch("KV layer count", static_cast<int64_t>(p.layer_buffers.size()),
                    static_cast<int64_t>(d.layer_buffers.size()));
  }
  for (size_t l = 0; l < p.layer_buffers.size(); ++l) {
    if (p.layer_buffers[l].size() != d.layer_buffers[l].size()) {
      return invalid_argument("layout mismatch: KV layer " + std::to_string(l) + " has " +
                              std::to_string(p.layer_buffers[l].size()) +
                              " buffers on prefill but " +
                              std::to_string(d.layer_buffers[l].size()) + " on decode");
    }
    for (size_t i = 0; i < p.layer_buffers[l].size(); ++i) {
      if (p.layer_buffers[l][i] != static_cast<int64_t>(d.layer_buffers[l][i])) {
        return invalid_argument("layout mismatch: layer_buffers[" + std::to_string(l) +
                                "] order differs between prefill and decode");
      }
    }
  }
  return check_groups(p, pl, d);
}

Status check_instance_compatible(const KvArgs& d, const proto::KvLayout& p,
                                 size_t prefill_kv_buffers) {
  PDKV_RETURN_IF_ERROR(check_geometry(p, d.layout()));
  if (prefill_kv_buffers != d.kv_data_ptrs.size()) {
    return mismatch("KV buffer count", static_cast<int64_t>(prefill_kv_buffers),
                    static_cast<int64_t>(d.kv_data_ptrs.size()));
  }
  return Status();
}

}  // namespace pdkv::kv
