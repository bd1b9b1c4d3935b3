// VmmBuffer: device memory made the way PyTorch's expandable segments make it
// (cuMemCreate with a POSIX file-descriptor handle type, cuMemAddressReserve, cuMemMap,
// cuMemSetAccess), for tests of the paths that must handle such memory (the cuda_ipc
// backend exports it as a file descriptor, not a legacy IPC handle). One mapped piece;
// the size is rounded up to the driver's granularity.
//
// Thread safety: any thread (each call binds its thread to the buffer's device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"

namespace pdkv::engine::testing {

class VmmBuffer {
 public:
  static Result<std::unique_ptr<VmmBuffer>> allocate(int device, size_t bytes);
  ~VmmBuffer();
  VmmBuffer(const VmmBuffer&) = delete;
  VmmBuffer& operator=(const VmmBuffer&) = delete;

  uint64_t addr() const { return addr_; }
  size_t size() const { return size_; }

  // Synchronous copies between host memory and [addr() + offset, +bytes).
  Status upload(size_t offset, const void* src, size_t bytes);
  Status download(size_t offset, void* dst, size_t bytes) const;

 private:
  VmmBuffer() = default;
  uint64_t addr_ = 0;
  size_t size_ = 0;
  size_t mapped_ = 0;
  unsigned long long handle_ = 0;
  int device_ = 0;
};

}  // namespace pdkv::engine::testing
