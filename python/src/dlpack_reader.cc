#include "dlpack_reader.h"

#include <dlpack/dlpack.h>

#include <string>

namespace pdkv::python {
namespace {

// The capsule name DLPack exporters use while nobody consumed the tensor.
constexpr const char* kCapsuleName = "dltensor";

std::string device_type_name(int type) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLOpenCL: return "opencl";
    case kDLVulkan: return "vulkan";
    case kDLMetal: return "metal";
    case kDLVPI: return "vpi";
    case kDLROCM: return "rocm";
    case kDLROCMHost: return "rocm_host";
    case kDLExtDev: return "ext_dev";
    case kDLCUDAManaged: return "cuda_managed";
    default: return "device type " + std::to_string(type);
  }
}

// Compact row-major strides (in elements), as DLPack means a null `strides`. Dimensions
// of extent 1 may carry any stride (torch gives them arbitrary ones), so they are skipped.
Status check_compact(const DLTensor& t) {
  if (t.strides == nullptr) return Status();
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) {
      return invalid_argument("the tensor is not contiguous (dimension " + std::to_string(d) +
                              " has stride " + std::to_string(t.strides[d]) + ", compact is " +
                              std::to_string(expected) +
                              "); register a contiguous tensor (.contiguous()) or its base");
    }
    expected *= t.shape[d];
  }
  return Status();
}

Result<uint64_t> byte_size(const DLTensor& t) {
  uint64_t elements = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0) return invalid_argument("the tensor has a negative extent");
    elements *= static_cast<uint64_t>(t.shape[d]);
  }
  const uint64_t bits = static_cast<uint64_t>(t.dtype.bits) * t.dtype.lanes;
  if (bits % 8 != 0) {
    return invalid_argument("the tensor's element size (" + std::to_string(bits) +
                            " bits) is not a whole number of bytes");
  }
  return elements * (bits / 8);
}

}  // namespace

Result<DlpackBuffer> read_dlpack_capsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) {
    return invalid_argument(
        "__dlpack__() did not return an unconsumed 'dltensor' capsule (was it already "
        "consumed?)");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed == nullptr) {
    PyErr_Clear();
    return invalid_argument("the DLPack capsule holds no tensor");
  }
  const DLTensor& t = managed->dl_tensor;
  DlpackBuffer out;
  switch (t.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost: out.kind = engine::MemoryKind::kHost; break;
    case kDLCUDA:
      out.kind = engine::MemoryKind::kCuda;
      out.device = t.device.device_id;
      break;
    case kDLCUDAManaged:
      return invalid_argument(
          "managed memory not supported yet (the tensor is CUDA managed "
          "memory); allocate the buffer with cudaMalloc");
    default:
      return invalid_argument("pdkv registers host and CUDA memory only, not " +
                              device_type_name(t.device.device_type) + " memory");
  }
  PDKV_RETURN_IF_ERROR(check_compact(t));
  PDKV_ASSIGN_OR_RETURN(out.nbytes, byte_size(t));
  out.ptr = reinterpret_cast<uint64_t>(t.data) + t.byte_offset;
  return out;
}

}  // namespace pdkv::python
