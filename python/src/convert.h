// Conversions between Python/numpy values and plan/ types for the pdkv.plan module.
//
// Arrays are converted in bulk through the buffer protocol (numpy casts int32 to int64
// in one pass; int64 input is viewed without a copy); no per-element Python objects.
// Every malformed input raises ValueError (pybind11::value_error) with a message, and
// throw_if_error is the one place a Status becomes a Python exception.
// All functions require the GIL.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/fragment_planner.h"
#include "plan/types.h"

namespace pdkv::pyplan {

namespace py = pybind11;

// A 1-D array kept alive by `owner`, viewed as `values`.
template <typename T>
struct ArrayView {
  py::object owner;
  std::span<const T> values;
};

[[noreturn]] void raise_value_error(const std::string& message);

// Raises ValueError with the status message if `status` is an error.
void throw_if_error(const Status& status);
template <typename T>
T value_or_raise(Result<T> r) {
  throw_if_error(r.status());
  return std::move(r).value();
}

// Integer arrays (numpy int/uint of any width, or lists of ints). `name` is used in
// messages. int64 values must fit (uint64 > INT64_MAX is rejected). With allow_scalar a
// single integer counts as a list of one (state slots).
ArrayView<int64_t> to_int64_array(py::handle obj, const char* name, bool allow_scalar = false);
// Non-negative integers as uint64 (pointers, lengths).
ArrayView<uint64_t> to_uint64_array(py::handle obj, const char* name);
// Boolean masks (bool, or integers where non-zero = true) as bytes 0/1.
ArrayView<uint8_t> to_mask_array(py::handle obj, const char* name);

// A Python integer (or numpy integer) as int64 / non-negative uint64.
int64_t to_int64(py::handle obj, const char* name);
uint64_t to_uint64(py::handle obj, const char* name);

// Reads `key` from a mapping, or the attribute of that name from any other object.
// Returns a null object when absent.
py::object get_field(py::handle obj, const char* key);

// layer_buffers: a sequence of sequences of buffer indices.
std::vector<std::vector<int64_t>> to_layer_buffers(py::handle obj);
// fragments: None or a sequence of dicts (or objects) with the contract's keys.
std::vector<plan::Fragment> to_fragments(py::handle obj);
py::dict fragment_to_dict(const plan::Fragment& f);

// A layout dict (see plan.pyi) for the fragment planner.
plan::SideLayout to_side_layout(py::handle obj, const char* side);

// Zero-copy hand-over of a vector of rows (3 elements each) to numpy; shape (n, 3).
template <typename Elem, typename Row>
py::array rows_to_numpy(std::vector<Row>&& rows) {
  static_assert(sizeof(Row) == 3 * sizeof(Elem));
  const auto n = static_cast<py::ssize_t>(rows.size());
  if (n == 0) return py::array_t<Elem>(std::vector<py::ssize_t>{0, 3});
  auto* heap = new std::vector<Row>(std::move(rows));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<Row>*>(p); });
  return py::array_t<Elem>(
      {n, py::ssize_t{3}},
      {static_cast<py::ssize_t>(sizeof(Row)), static_cast<py::ssize_t>(sizeof(Elem))},
      reinterpret_cast<const Elem*>(heap->data()), owner);
}

// Zero-copy hand-over of an int64 vector; shape (n,).
py::array vector_to_numpy(std::vector<int64_t>&& v);

}  // namespace pdkv::pyplan
