#include "convert.h"

#include <cctype>
#include <limits>

namespace pdkv::pyplan {
namespace {

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

// np.asarray(obj) as a 1-D array; empty input gives an empty (any dtype) array.
py::array as_1d(py::handle obj, const char* name, bool allow_scalar = false) {
  py::array arr = py::array::ensure(obj);
  if (!arr) raise_value_error(std::string(name) + " must be an array or a list");
  if (allow_scalar && arr.ndim() == 0) arr = arr.attr("reshape")(1);
  if (arr.size() != 0 && arr.ndim() != 1) {
    raise_value_error(std::string(name) + " must be 1-D, got " + std::to_string(arr.ndim()) +
                      " dimensions");
  }
  return arr;
}

constexpr int kCast = py::array::c_style | py::array::forcecast;

}  // namespace

void raise_value_error(const std::string& message) { throw py::value_error(message); }

void throw_if_error(const Status& status) {
  if (!status.ok()) raise_value_error(status.message());
}

ArrayView<int64_t> to_int64_array(py::handle obj, const char* name, bool allow_scalar) {
  py::array arr = as_1d(obj, name, allow_scalar);
  if (arr.size() == 0) return {py::none(), {}};
  const char kind = arr.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    raise_value_error(std::string(name) + " must hold integers, not " + dtype_name(arr));
  }
  if (kind == 'u' && arr.itemsize() == 8) {
    auto u = py::array_t<uint64_t, kCast>::ensure(arr);
    for (uint64_t v : std::span<const uint64_t>(u.data(), static_cast<size_t>(u.size()))) {
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        raise_value_error(std::string(name) + " holds a value beyond int64");
      }
    }
  }
  auto a = py::array_t<int64_t, kCast>::ensure(arr);
  if (!a) raise_value_error(std::string(name) + " cannot be converted to int64");
  return {a, std::span<const int64_t>(a.data(), static_cast<size_t>(a.size()))};
}

ArrayView<uint64_t> to_uint64_array(py::handle obj, const char* name) {
  py::array arr = as_1d(obj, name);
  if (arr.size() == 0) return {py::none(), {}};
  const char kind = arr.dtype().kind();
  if (kind == 'u') {
    auto a = py::array_t<uint64_t, kCast>::ensure(arr);
    return {a, std::span<const uint64_t>(a.data(), static_cast<size_t>(a.size()))};
  }
  if (kind != 'i') {
    raise_value_error(std::string(name) + " must hold integers in [0, 2**64), not " +
                      dtype_name(arr));
  }
  auto a = py::array_t<int64_t, kCast>::ensure(arr);
  const std::span<const int64_t> s(a.data(), static_cast<size_t>(a.size()));
  for (int64_t v : s) {
    if (v < 0)
      raise_value_error(std::string(name) + " holds a negative value " + std::to_string(v));
  }
  // Non-negative int64 has the same bits as uint64.
  return {a, std::span<const uint64_t>(reinterpret_cast<const uint64_t*>(s.data()), s.size())};
}

ArrayView<uint8_t> to_mask_array(py::handle obj, const char* name) {
  py::array arr = as_1d(obj, name);
  if (arr.size() == 0) return {py::none(), {}};
  const char kind = arr.dtype().kind();
  if (kind != 'b' && kind != 'i' && kind != 'u') {
    raise_value_error(std::string(name) + " must be a boolean mask, not " + dtype_name(arr));
  }
  auto a = py::array_t<bool, kCast>::ensure(arr);
  static_assert(sizeof(bool) == 1);
  return {a, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(a.data()),
                                      static_cast<size_t>(a.size()))};
}

int64_t to_int64(py::handle obj, const char* name) {
  PyObject* index = PyNumber_Index(obj.ptr());
  if (!index) {
    PyErr_Clear();
    raise_value_error(std::string(name) + " must be an integer");
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
  Py_DECREF(index);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    raise_value_error(std::string(name) + " does not fit in int64");
  }
  return v;
}

uint64_t to_uint64(py::handle obj, const char* name) {
  PyObject* index = PyNumber_Index(obj.ptr());
  if (!index) {
    PyErr_Clear();
    raise_value_error(std::string(name) + " must be an integer");
  }
  const unsigned long long v = PyLong_AsUnsignedLongLong(index);
  Py_DECREF(index);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    raise_value_error(std::string(name) + " must be an integer in [0, 2**64)");
  }
  return v;
}

py::object get_field(py::handle obj, const char* key) {
  if (py::isinstance<py::dict>(obj)) {
    auto d = py::reinterpret_borrow<py::dict>(obj);
    if (d.contains(key)) return d[key];
    return py::object();
  }
  if (py::hasattr(obj, key)) return obj.attr(key);
  return py::object();
}

std::vector<std::vector<int64_t>> to_layer_buffers(py::handle obj) {
  std::vector<std::vector<int64_t>> out;
  if (!py::isinstance<py::iterable>(obj))
    raise_value_error("layer_buffers must be a list of lists");
  for (py::handle layer : obj) {
    if (!py::isinstance<py::iterable>(layer)) {
      raise_value_error("layer_buffers must be a list of lists of buffer indices");
    }
    auto& row = out.emplace_back();
    for (py::handle b : layer) row.push_back(to_int64(b, "layer_buffers entry"));
  }
  return out;
}

namespace {

plan::BufferKind kind_of(py::handle v) {
  py::object s = py::reinterpret_borrow<py::object>(v);
  if (!py::isinstance<py::str>(s) && py::hasattr(s, "value")) s = s.attr("value");  // Enum
  if (!py::isinstance<py::str>(s)) raise_value_error("fragment buffer_kind must be a string");
  std::string name = s.cast<std::string>();
  // Enum member names ("MAMBA_STATE") spell the same kinds in upper case.
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return value_or_raise(plan::parse_buffer_kind(name));
}

uint64_t required_u64(py::handle frag, const char* key) {
  py::object v = get_field(frag, key);
  if (!v) raise_value_error(std::string("fragment lacks '") + key + "'");
  return to_uint64(v, key);
}

}  // namespace

std::vector<plan::Fragment> to_fragments(py::handle obj) {
  std::vector<plan::Fragment> out;
  if (obj.is_none()) return out;
  if (!py::isinstance<py::iterable>(obj) || py::isinstance<py::str>(obj)) {
    raise_value_error("fragments must be None or a list of dicts");
  }
  for (py::handle frag : obj) {
    plan::Fragment f;
    py::object kind = get_field(frag, "buffer_kind");
    if (!kind) raise_value_error("fragment lacks 'buffer_kind'");
    f.kind = kind_of(kind);
    py::object index = get_field(frag, "buffer_index");
    if (!index) raise_value_error("fragment lacks 'buffer_index'");
    f.buffer_index = to_int64(index, "buffer_index");
    if (f.buffer_index < 0) raise_value_error("fragment buffer_index is negative");
    f.src_page_stride_bytes = required_u64(frag, "src_page_stride_bytes");
    f.dst_page_stride_bytes = required_u64(frag, "dst_page_stride_bytes");
    f.src_byte_offset = required_u64(frag, "src_byte_offset");
    f.dst_byte_offset = required_u64(frag, "dst_byte_offset");
    f.bytes_per_page = required_u64(frag, "bytes_per_page");
    py::object count = get_field(frag, "page_count");
    if (count && !count.is_none()) f.page_count = to_uint64(count, "page_count");
    for (auto [key, field] :
         {std::pair{"src_rank", &f.src_rank}, std::pair{"dst_rank", &f.dst_rank}}) {
      py::object r = get_field(frag, key);
      if (r && !r.is_none()) *field = static_cast<int32_t>(to_int64(r, key));
    }
    out.push_back(f);
  }
  return out;
}

py::dict fragment_to_dict(const plan::Fragment& f) {
  py::dict d;
  d["buffer_kind"] = std::string(plan::buffer_kind_name(f.kind));
  d["buffer_index"] = f.buffer_index;
  d["src_rank"] = f.src_rank;
  d["dst_rank"] = f.dst_rank;
  d["src_page_stride_bytes"] = f.src_page_stride_bytes;
  d["dst_page_stride_bytes"] = f.dst_page_stride_bytes;
  d["src_byte_offset"] = f.src_byte_offset;
  d["dst_byte_offset"] = f.dst_byte_offset;
  d["bytes_per_page"] = f.bytes_per_page;
  d["page_count"] = f.page_count ? py::object(py::int_(*f.page_count)) : py::object(py::none());
  return d;
}

py::array vector_to_numpy(std::vector<int64_t>&& v) {
  const auto n = static_cast<py::ssize_t>(v.size());
  if (n == 0) return py::array_t<int64_t>(0);
  auto* heap = new std::vector<int64_t>(std::move(v));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<int64_t>*>(p); });
  return py::array_t<int64_t>({n}, {static_cast<py::ssize_t>(sizeof(int64_t))}, heap->data(),
                              owner);
}

}  // namespace pdkv::pyplan
