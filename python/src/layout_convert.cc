// Layout dicts of pdkv.plan.plan_fragments -> plan::SideLayout (see plan.pyi).
#include <algorithm>

#include "convert.h"

namespace pdkv::pyplan {
namespace {

std::string key_name(const char* side, const char* key) { return std::string(side) + "." + key; }

int64_t int_field(py::handle obj, const char* side, const char* key, std::optional<int64_t> dflt) {
  py::object v = get_field(obj, key);
  if (!v || v.is_none()) {
    if (!dflt) raise_value_error(key_name(side, key) + " is required");
    return *dflt;
  }
  return to_int64(v, key_name(side, key).c_str());
}

std::vector<uint64_t> u64_list(py::handle obj, const char* side, const char* key) {
  py::object v = get_field(obj, key);
  if (!v || v.is_none()) return {};
  auto a = to_uint64_array(v, key_name(side, key).c_str());
  return {a.values.begin(), a.values.end()};
}

// Kinds from layer_buffers: position 0 is K (or the MLA latent), 1 is V; KV layers at or
// past target_layer_num are draft layers.
std::vector<plan::BufferKind> kinds_from_layers(py::handle obj, const char* side) {
  const auto layers = to_layer_buffers(get_field(obj, "layer_buffers"));
  const int64_t target_layers =
      int_field(obj, side, "target_layer_num", static_cast<int64_t>(layers.size()));
  int64_t nbuf = 0;
  for (const auto& l : layers)
    for (int64_t b : l) nbuf = std::max(nbuf, b + 1);
  std::vector<plan::BufferKind> kinds(static_cast<size_t>(nbuf), plan::BufferKind::kKv);
  for (size_t j = 0; j < layers.size(); ++j) {
    if (layers[j].empty() || layers[j].size() > 2) {
      raise_value_error(key_name(side, "layer_buffers") + ": a KV layer has [k, v] or [latent]");
    }
    const bool draft = static_cast<int64_t>(j) >= target_layers;
    for (size_t pos = 0; pos < layers[j].size(); ++pos) {
      const int64_t b = layers[j][pos];
      if (b < 0) raise_value_error(key_name(side, "layer_buffers") + ": negative buffer index");
      auto& k = kinds[static_cast<size_t>(b)];
      if (k != plan::BufferKind::kKv) {
        raise_value_error(key_name(side, "layer_buffers") + ": buffer listed twice");
      }
      k = draft ? (pos == 0 ? plan::BufferKind::kDraftK : plan::BufferKind::kDraftV)
                : (pos == 0 ? plan::BufferKind::kTargetK : plan::BufferKind::kTargetV);
    }
  }
  if (std::find(kinds.begin(), kinds.end(), plan::BufferKind::kKv) != kinds.end()) {
    raise_value_error(key_name(side, "layer_buffers") + ": a buffer index is in no layer");
  }
  return kinds;
}

}  // namespace

plan::SideLayout to_side_layout(py::handle obj, const char* side) {
  plan::SideLayout s;
  s.tp_size = int_field(obj, side, "tp_size", std::nullopt);
  s.page_size = int_field(obj, side, "page_size", 1);
  py::object layout = get_field(obj, "page_layout");
  if (layout && !layout.is_none()) {
    const std::string l = py::str(layout).cast<std::string>();
    if (l == "NHD") {
      s.page_layout = plan::PageLayout::kNHD;
    } else if (l == "HND") {
      s.page_layout = plan::PageLayout::kHND;
    } else {
      raise_value_error(key_name(side, "page_layout") + " must be 'NHD' or 'HND', not '" + l + "'");
    }
  }
  py::object mla = get_field(obj, "is_mla");
  s.is_mla = mla && !mla.is_none() && py::bool_(mla);
  s.target.total_kv_heads = int_field(obj, side, "total_kv_head_num", std::nullopt);
  s.target.head_dim = int_field(obj, side, "head_dim", std::nullopt);
  s.target.dtype_bytes = int_field(obj, side, "dtype_bytes", std::nullopt);
  py::object dh = get_field(obj, "draft_total_kv_head_num");
  py::object dd = get_field(obj, "draft_head_dim");
  if ((dh && !dh.is_none()) || (dd && !dd.is_none())) {
    s.draft = s.target;
    s.draft->total_kv_heads =
        int_field(obj, side, "draft_total_kv_head_num", s.target.total_kv_heads);
    s.draft->head_dim = int_field(obj, side, "draft_head_dim", s.target.head_dim);
  }
  py::object kinds = get_field(obj, "buffer_kinds");
  if (kinds && !kinds.is_none()) {
    for (py::handle k : kinds) {
      s.kv_buffer_kinds.push_back(
          value_or_raise(plan::parse_buffer_kind(py::str(k).cast<std::string>())));
    }
  } else if (get_field(obj, "layer_buffers")) {
    s.kv_buffer_kinds = kinds_from_layers(obj, side);
  } else {
    raise_value_error(std::string(side) + " needs buffer_kinds or layer_buffers");
  }
  s.kv_item_lens = u64_list(obj, side, "kv_item_lens");
  s.state_item_lens = u64_list(obj, side, "state_item_lens");
  return s;
}

}  // namespace pdkv::pyplan
