// pdkv._native.settings_catalog(): every PDKV_* setting as declared in C++
// (kv/settings_catalog.h), so pdkv.Config and docs/CONFIG.md are made from the same specs
// the C++ readers read.
#pragma once

#include <pybind11/pybind11.h>

namespace pdkv::python {

void add_settings_functions(pybind11::module_& m);

}  // namespace pdkv::python
