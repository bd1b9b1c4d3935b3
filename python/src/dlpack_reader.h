// Reads what a DLPack capsule describes (pointer, size, memory kind, device) without
// consuming it: the capsule keeps its name "dltensor" and its destructor still frees the
// tensor, so the exporter's object stays the owner of the memory.
//
// Only what pdkv can register is accepted: compact (contiguous) tensors on the CPU, in
// pinned host memory or on a CUDA device. Managed memory and every other device type are
// refused with the reason. Errors are values (InvalidArgument); the caller maps them to
// Python exceptions. Requires the GIL (it reads a Python capsule).
#pragma once

#include <Python.h>

#include <cstdint>

#include "common/status.h"
#include "engine/device/memory_kind.h"

namespace pdkv::python {

struct DlpackBuffer {
  uint64_t ptr = 0;     // data + byte_offset
  uint64_t nbytes = 0;  // elements x element size
  engine::MemoryKind kind = engine::MemoryKind::kHost;
  int device = -1;  // CUDA device ordinal, -1 for host memory
};

Result<DlpackBuffer> read_dlpack_capsule(PyObject* capsule);

}  // namespace pdkv::python
