// The records of the device-handle socket (fd_channel.h), as pure encode/decode
// functions so the decoders facing other processes are tested apart from the sockets.
// All little-endian (`str` = u32 length + bytes):
//   request   exactly kTokenBytes: the session token the lease channel's hello gave
//   header    u32 kMagic, u8 ok, u64 epoch, u32 count, str message (why not ok)
//   entry     u8 kind, u64 id, u64 base, u64 size, 16 bytes device uuid,
//             64 bytes legacy handle (zero for kPosixFd); a kPosixFd entry carries its
//             file descriptor (SCM_RIGHTS), a kLegacy entry none
// Each decoder takes one record and returns DataLoss when it is short, carries trailing
// bytes, holds an unknown kind, an empty or overflowing range, or more entries than
// kMaxExportedPieces.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/device/cuda_ipc_driver.h"

namespace pdkv::engine::cuda_ipc {

inline constexpr size_t kTokenBytes = 32;
inline constexpr uint32_t kMagic = 0x54494b50;  // "PKIT"
// Device pieces one receiver exports at most (a piece is an allocation or a mapped piece;
// PyTorch's expandable segments map 20 MiB pieces, so 4096 cover 80 GiB).
inline constexpr uint32_t kMaxExportedPieces = 4096;

struct TableHeader {
  bool ok = false;
  uint64_t epoch = 0;
  uint32_t count = 0;
  std::string message;
};

struct HandleEntry {
  IpcHandleKind kind = IpcHandleKind::kLegacy;
  uint64_t id = 0;  // unique per export in the exporter's life: a re-registered range is new
  uint64_t base = 0;
  uint64_t size = 0;
  DeviceUuid device{};
  std::array<uint8_t, kLegacyHandleBytes> legacy{};
};

void encode_header(const TableHeader& h, std::vector<uint8_t>* out);
Result<TableHeader> decode_header(std::span<const uint8_t> record);

void encode_entry(const HandleEntry& e, std::vector<uint8_t>* out);
Result<HandleEntry> decode_entry(std::span<const uint8_t> record);

}  // namespace pdkv::engine::cuda_ipc
