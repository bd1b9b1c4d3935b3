// pdkv._native's device-memory functions: what the driver says a pointer is
// (memory_info), which driver the process loaded (device_driver), and the buffer a
// DLPack exporter describes (dlpack_buffer). pdkv/kv.py and the engine adapters use them
// to register each buffer as the memory it really is.
#pragma once

#include <pybind11/pybind11.h>

namespace pdkv::python {

void add_device_functions(pybind11::module_& m);

}  // namespace pdkv::python
