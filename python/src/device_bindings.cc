#include "device_bindings.h"

#include <string>

#include "dlpack_reader.h"
#include "engine/device/device_driver.h"
#include "engine/device/device_health.h"

namespace py = pybind11;

namespace pdkv::python {
namespace {

// The one place these functions turn an error into a Python exception: every refusal
// here is about the caller's buffer, so ValueError.
template <typename T>
T or_value_error(Result<T> result) {
  if (!result.ok()) throw py::value_error(result.status().message());
  return std::move(result).value();
}

py::dict memory_info(uint64_t ptr) {
  engine::PointerInfo info;  // host, when the process has no driver
  if (engine::DeviceDriver* driver = engine::device_driver()) {
    py::gil_scoped_release release;
    info = or_value_error(driver->query_pointer(ptr));
  }
  py::dict out;
  out["kind"] = std::string(engine::to_string(info.kind));
  out["device"] = info.device;
  out["managed"] = info.managed;
  out["allocation_base"] = info.allocation_base;
  out["allocation_size"] = info.allocation_size;
  return out;
}

py::object device_driver_description() {
  engine::DeviceDriver* driver = engine::device_driver();
  if (driver == nullptr) return py::none();
  return py::str(driver->description());
}

py::tuple dlpack_buffer(py::object obj) {
  if (!py::hasattr(obj, "__dlpack__")) {
    throw py::value_error("the object has no __dlpack__ (pass an int pointer or a tensor)");
  }
  // No stream argument: torch 1.13 takes none, and the ordering contract is that the
  // caller synchronised before handing pdkv its buffers.
  py::object capsule = obj.attr("__dlpack__")();
  const DlpackBuffer b = or_value_error(read_dlpack_capsule(capsule.ptr()));
  return py::make_tuple(b.ptr, b.nbytes, std::string(engine::to_string(b.kind)), b.device);
}

py::dict device_health() {
  const Status fault = engine::device_fault();
  py::dict out;
  out["healthy"] = fault.ok();
  out["reason"] = fault.ok() ? std::string() : fault.message();
  return out;
}

}  // namespace

void add_device_functions(py::module_& m) {
  m.def("device_health", &device_health,
        "{healthy, reason}: healthy is False for good once a sticky CUDA error (an illegal "
        "address, a launch failure) failed this process's context; reason is that error.");
  m.def("memory_info", &memory_info, py::arg("ptr"),
        "What the device driver says `ptr` is: {kind: 'host'|'cuda', device, managed, "
        "allocation_base, allocation_size}; host when the process has no driver.");
  m.def("device_driver", &device_driver_description,
        "The loaded device driver's description, or None when there is none.");
  m.def("device_driver_absent_reason", &engine::device_driver_absent_reason);
  m.def("dlpack_buffer", &dlpack_buffer, py::arg("obj"),
        "(ptr, nbytes, kind, device) of a DLPack exporter, read without consuming it.");
}

}  // namespace pdkv::python
