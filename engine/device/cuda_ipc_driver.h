// IpcDriver: device memory shared between processes of one host, and the device-to-device
// copies into it. What the cuda_ipc backend (engine/backends/cuda_ipc/) needs of the
// driver beyond DeviceDriver (device_driver.h), resolved from the same library.
//
// Two kinds of exportable memory exist, and a receiver's registered region may hold
// pieces of either:
//  * cuMemAlloc-style allocations (PyTorch's caching allocator by default): a legacy IPC
//    handle (cuIpcGetMemHandle, 64 opaque bytes) names the whole allocation; the opener
//    maps it with cuIpcOpenMemHandle and gets the allocation's base in its own space.
//  * cuMemCreate allocations mapped with cuMemMap (PyTorch's expandable segments, any
//    virtual-memory allocator): each mapped piece is one physical allocation, exported
//    as a POSIX file descriptor (cuMemExportToShareableHandle), which crosses processes
//    only over a Unix socket (SCM_RIGHTS); the opener imports it, reserves an address
//    range, maps it and grants its own device access (cuMemSetAccess).
// cuMemGetAddressRange reports the piece in both cases (the allocation, or the mapped
// piece), so export_piece() walks a region piece by piece.
//
// Devices are named across processes by UUID: ordinals depend on CUDA_VISIBLE_DEVICES.
//
// Thread safety: all methods may be called concurrently; calls that need a context say
// which device the calling thread must be bound to (DeviceDriver::bind_thread).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/device/device_driver.h"

namespace pdkv::engine {

using DeviceUuid = std::array<uint8_t, 16>;

enum class IpcHandleKind : uint8_t {
  kLegacy = 1,   // cuIpcGetMemHandle
  kPosixFd = 2,  // cuMemExportToShareableHandle, POSIX file descriptor
};

inline constexpr size_t kLegacyHandleBytes = 64;

// One exportable piece of device memory, as the exporter sees it.
struct ExportedPiece {
  IpcHandleKind kind = IpcHandleKind::kLegacy;
  uint64_t base = 0;  // the piece's first byte in the exporter's address space
  uint64_t size = 0;
  std::array<uint8_t, kLegacyHandleBytes> legacy{};  // kLegacy
  UniqueFd fd;                                       // kPosixFd
};

// A piece mapped into this process (close it with IpcDriver::close_piece).
struct OpenedPiece {
  IpcHandleKind kind = IpcHandleKind::kLegacy;
  uint64_t local = 0;  // where the piece's first byte is mapped here
  uint64_t size = 0;
  uint64_t vmm_handle = 0;  // kPosixFd: the imported allocation handle
};

class IpcDriver {
 public:
  virtual ~IpcDriver() = default;

  // The piece of device memory holding `addr`: the thread is bound to its device.
  virtual Result<ExportedPiece> export_piece(uint64_t addr) = 0;
  // Maps a piece another process exported, for the device the thread is bound to
  // (`device`, its ordinal here). `fd` is only read (the caller keeps and closes it).
  virtual Result<OpenedPiece> open_piece(IpcHandleKind kind, std::span<const uint8_t> legacy,
                                         int fd, uint64_t size, int device) = 0;
  virtual void close_piece(const OpenedPiece& piece) = 0;

  virtual Result<DeviceUuid> uuid(int device) = 0;
  // The ordinal here of the device with `uuid`, or -1 when this process does not see it.
  virtual int device_with_uuid(const DeviceUuid& uuid) = 0;
  // Whether `device` reaches `peer`'s memory directly (true for the same device).
  virtual Result<bool> can_access_peer(int device, int peer) = 0;

  // Device-to-device copies on `stream` (the thread bound to its device): many pieces as
  // one driver call where the driver has cuMemcpyBatchAsync, else one call each.
  virtual Status copy_batch(DeviceStreamHandle stream, std::span<const CopyPiece> pieces) = 0;
  // rows x width bytes, both sides device memory (StridedCopy::to_device is ignored).
  virtual Status copy_strided(DeviceStreamHandle stream, const StridedCopy& copy) = 0;
  virtual bool batches_copies() const = 0;
};

// The process's IPC driver over the library device_driver() loaded; null when there is
// none or it lacks the IPC calls (ipc_driver_absent_reason() says which).
IpcDriver* ipc_driver();
std::string ipc_driver_absent_reason();

}  // namespace pdkv::engine
