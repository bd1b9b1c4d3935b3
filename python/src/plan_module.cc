// pdkv.plan: the Python face of plan/ (contract: docs/API.md, stub: plan.pyi).
//
// Thin by design: each function converts its arguments in bulk (convert.h), calls the
// pure C++ planner with the GIL released for the page-proportional work, and hands the
// result vector to numpy without copying. Errors come back as ValueError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "convert.h"
#include "output_buffer.h"
#include "plan/blocks.h"
#include "plan/coalesce.h"
#include "plan/fragment_planner.h"
#include "plan/resolve.h"
#include "plan/schedule.h"
#include "plan/state_blocks.h"

namespace pdkv::pyplan {
namespace {

std::optional<int64_t> optional_int(py::handle obj, const char* name) {
  if (obj.is_none()) return std::nullopt;
  return to_int64(obj, name);
}

// A tuple/list of exactly `n` metadata arrays (elements may be None = missing).
py::sequence l15_tuple(py::handle obj, size_t n, const char* name) {
  if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj) || py::len(obj) != n) {
    raise_value_error(std::string(name) + " must be None or a tuple of " + std::to_string(n) +
                      " arrays");
  }
  return py::reinterpret_borrow<py::sequence>(obj);
}

py::array coalesce_py(py::handle src_pages, py::handle dst_pages) {
  auto src = to_int64_array(src_pages, "src_pages");
  auto dst = to_int64_array(dst_pages, "dst_pages");
  return rows_to_numpy<int64_t>(value_or_raise(plan::coalesce(src.values, dst.values)));
}

py::tuple resolve_indices_py(py::handle src_pages, py::handle dst_pages, py::handle slice_start,
                             py::handle slice_stop, py::handle src_l15, py::handle dst_l15) {
  auto src = to_int64_array(src_pages, "src_pages");
  auto dst = to_int64_array(dst_pages, "dst_pages");
  const auto start = optional_int(slice_start, "slice_start");
  const auto stop = optional_int(slice_stop, "slice_stop");

  std::vector<py::object> keep;  // keeps converted metadata alive
  auto mask_of = [&](py::handle h, const char* name) -> std::optional<std::span<const uint8_t>> {
    if (h.is_none()) return std::nullopt;
    auto a = to_mask_array(h, name);
    keep.push_back(a.owner);
    return a.values;
  };
  auto ints_of = [&](py::handle h, const char* name) -> std::optional<std::span<const int64_t>> {
    if (h.is_none()) return std::nullopt;
    auto a = to_int64_array(h, name);
    keep.push_back(a.owner);
    return a.values;
  };
  plan::SrcOwnership src_own;
  plan::DstOwnership dst_own;
  if (!src_l15.is_none()) {
    auto t = l15_tuple(src_l15, 2, "src_l15");
    src_own.page_transfer_mask = mask_of(t[0], "src_l15 page_transfer_mask");
    src_own.page_local_indices = ints_of(t[1], "src_l15 page_local_indices");
  }
  if (!dst_l15.is_none()) {
    auto t = l15_tuple(dst_l15, 3, "dst_l15");
    dst_own.page_transfer_mask = mask_of(t[0], "dst_l15 page_transfer_mask");
    dst_own.page_indices_mapping = ints_of(t[1], "dst_l15 page_indices_mapping");
    dst_own.page_local_indices = ints_of(t[2], "dst_l15 page_local_indices");
  }
  auto r = value_or_raise(plan::resolve_indices(src.values, dst.values, start, stop,
                                                src_l15.is_none() ? nullptr : &src_own,
                                                dst_l15.is_none() ? nullptr : &dst_own));
  return py::make_tuple(vector_to_numpy(std::move(r.src_pages)),
                        vector_to_numpy(std::move(r.dst_pages)));
}

struct Buffers {
  ArrayView<uint64_t> src_ptrs, dst_ptrs, item_lens, src_lens, dst_lens;
  plan::BufferTable table() const {
    return {src_ptrs.values, dst_ptrs.values, item_lens.values, src_lens.values, dst_lens.values};
  }
};

Buffers buffers_of(py::handle src_ptrs, py::handle dst_ptrs, py::handle item_lens,
                   py::handle src_lens, py::handle dst_lens) {
  Buffers b{to_uint64_array(src_ptrs, "src_ptrs"),
            to_uint64_array(dst_ptrs, "dst_ptrs"),
            to_uint64_array(item_lens, "item_lens"),
            {},
            {}};
  if (!src_lens.is_none()) b.src_lens = to_uint64_array(src_lens, "src_lens");
  if (!dst_lens.is_none()) b.dst_lens = to_uint64_array(dst_lens, "dst_lens");
  // A given but empty length list must still match the buffer count.
  if (!src_lens.is_none() && b.src_lens.values.empty() && !b.src_ptrs.values.empty()) {
    raise_value_error("src_lens has 0 entries for " + std::to_string(b.src_ptrs.values.size()) +
                      " buffers");
  }
  if (!dst_lens.is_none() && b.dst_lens.values.empty() && !b.dst_ptrs.values.empty()) {
    raise_value_error("dst_lens has 0 entries for " + std::to_string(b.dst_ptrs.values.size()) +
                      " buffers");
  }
  return b;
}

py::array kv_blocks_py(py::handle src_ptrs, py::handle dst_ptrs, py::handle item_lens,
                       py::handle layer_buffers, py::handle src_pages, py::handle dst_pages,
                       py::handle begin_layer, py::handle end_layer, py::handle fragments,
                       py::handle src_lens, py::handle dst_lens) {
  const Buffers bufs = buffers_of(src_ptrs, dst_ptrs, item_lens, src_lens, dst_lens);
  const auto layers = to_layer_buffers(layer_buffers);
  auto src = to_int64_array(src_pages, "src_pages");
  auto dst = to_int64_array(dst_pages, "dst_pages");
  const int64_t begin = to_int64(begin_layer, "begin_layer");
  const int64_t end = to_int64(end_layer, "end_layer");
  const auto frags = to_fragments(fragments);
  auto prepared = value_or_raise(
      plan::KvBlockPlan::prepare(bufs.table(), layers, src.values, dst.values, begin, end, frags));
  const auto cap = static_cast<py::ssize_t>(prepared.max_blocks());
  // Written in place, into recycled memory for large lists (output_buffer.h), no copy.
  py::array_t<uint64_t> out = new_row_array(static_cast<size_t>(cap));
  Result<size_t> n = Status();
  {
    py::gil_scoped_release nogil;
    n = prepared.write(
        {reinterpret_cast<plan::Block*>(out.mutable_data()), static_cast<size_t>(cap)});
  }
  const auto rows = static_cast<py::ssize_t>(value_or_raise(std::move(n)));
  if (rows == cap) return out;
  // Merging shrank the list: keep only the rows written (copy if most of it is unused).
  py::array view = out[py::slice(0, rows, 1)];
  return rows < cap / 2 ? py::array(py::array_t<uint64_t>(view)) : view;
}

py::array state_blocks_py(py::handle src_ptrs, py::handle dst_ptrs, py::handle item_lens,
                          py::handle src_slots, py::handle dst_slots, py::handle state_layer_ids,
                          py::handle begin_layer, py::handle end_layer, py::handle fragments,
                          py::handle src_lens, py::handle dst_lens) {
  const Buffers bufs = buffers_of(src_ptrs, dst_ptrs, item_lens, src_lens, dst_lens);
  std::vector<ArrayView<int64_t>> keep;
  auto opt = [&](py::handle h, const char* name) -> std::optional<std::span<const int64_t>> {
    if (h.is_none()) return std::nullopt;
    keep.push_back(to_int64_array(h, name, /*allow_scalar=*/true));
    return keep.back().values;
  };
  keep.reserve(3);
  plan::StateSlots slots;
  slots.src_slots = opt(src_slots, "src_slots");
  slots.dst_slots = opt(dst_slots, "dst_slots");
  slots.state_layer_ids = opt(state_layer_ids, "state_layer_ids");
  slots.begin_layer = optional_int(begin_layer, "begin_layer");
  slots.end_layer = optional_int(end_layer, "end_layer");
  const auto frags = to_fragments(fragments);
  Result<std::vector<plan::Block>> r = Status();
  {
    py::gil_scoped_release nogil;
    r = plan::state_blocks(bufs.table(), slots, frags);
  }
  return rows_to_numpy<uint64_t>(value_or_raise(std::move(r)));
}

py::array layer_groups_py(py::handle layer_num, py::handle interval, py::handle begin_cache_step) {
  return rows_to_numpy<int64_t>(value_or_raise(
      plan::layer_groups(to_int64(layer_num, "layer_num"), to_int64(interval, "interval"),
                         to_int64(begin_cache_step, "begin_cache_step"))));
}

py::dict plan_fragments_py(py::handle prefill, py::handle decode, py::handle decode_rank) {
  const auto pre = to_side_layout(prefill, "prefill");
  const auto dec = to_side_layout(decode, "decode");
  auto plan = value_or_raise(plan::plan_fragments(pre, dec, to_int64(decode_rank, "decode_rank")));
  py::list targets;
  for (const auto& t : plan.targets) {
    py::dict d;
    d["prefill_rank"] = t.prefill_rank;
    d["dummy"] = t.dummy;
    d["send_state"] = t.send_state;
    d["required_dst_info_num"] = t.required_dst_info_num;
    py::list frags;
    for (const auto& f : t.fragments) frags.append(fragment_to_dict(f));
    d["fragments"] = frags;
    targets.append(d);
  }
  py::dict out;
  out["identity"] = plan.identity;
  out["targets"] = targets;
  out["required_prefill_response_num"] = plan.required_prefill_response_num;
  out["idle_prefill_ranks"] = py::cast(plan.idle_prefill_ranks);
  return out;
}

}  // namespace

PYBIND11_MODULE(plan, m) {
  m.doc() = "pdkv transfer planning (pure functions, numpy in / numpy out); see plan.pyi";
  m.def("coalesce", &coalesce_py, py::arg("src_pages"), py::arg("dst_pages"));
  m.def("resolve_indices", &resolve_indices_py, py::arg("src_pages"), py::arg("dst_pages"),
        py::arg("slice_start"), py::arg("slice_stop"), py::arg("src_l15") = py::none(),
        py::arg("dst_l15") = py::none());
  m.def("kv_blocks", &kv_blocks_py, py::arg("src_ptrs"), py::arg("dst_ptrs"), py::arg("item_lens"),
        py::arg("layer_buffers"), py::arg("src_pages"), py::arg("dst_pages"),
        py::arg("begin_layer"), py::arg("end_layer"), py::arg("fragments") = py::none(),
        py::kw_only(), py::arg("src_lens") = py::none(), py::arg("dst_lens") = py::none());
  m.def("state_blocks", &state_blocks_py, py::arg("src_ptrs"), py::arg("dst_ptrs"),
        py::arg("item_lens"), py::arg("src_slots"), py::arg("dst_slots"),
        py::arg("state_layer_ids") = py::none(), py::arg("begin_layer") = py::none(),
        py::arg("end_layer") = py::none(), py::arg("fragments") = py::none(), py::kw_only(),
        py::arg("src_lens") = py::none(), py::arg("dst_lens") = py::none());
  m.def("layer_groups", &layer_groups_py, py::arg("layer_num"), py::arg("interval"),
        py::arg("begin_cache_step"));
  m.def("plan_fragments", &plan_fragments_py, py::arg("prefill"), py::arg("decode"),
        py::arg("decode_rank"));
}

}  // namespace pdkv::pyplan
