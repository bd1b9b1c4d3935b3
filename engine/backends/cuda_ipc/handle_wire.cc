#include "engine/backends/cuda_ipc/handle_wire.h"

#include <algorithm>
#include <limits>

#include "engine/lease/wire.h"

namespace pdkv::engine::cuda_ipc {

void encode_header(const TableHeader& h, std::vector<uint8_t>* out) {
  lease::Writer w(*out);
  w.u32(kMagic);
  w.u8(h.ok ? 1 : 0);
  w.u64(h.epoch);
  w.u32(h.count);
  w.bytes(h.message.substr(0, 1024));
}

Result<TableHeader> decode_header(std::span<const uint8_t> record) {
  lease::Reader r(record);
  uint32_t magic = 0;
  uint8_t ok = 0;
  TableHeader h;
  PDKV_RETURN_IF_ERROR(r.u32(&magic));
  if (magic != kMagic) return data_loss("device-handle table: bad magic");
  PDKV_RETURN_IF_ERROR(r.u8(&ok));
  PDKV_RETURN_IF_ERROR(r.u64(&h.epoch));
  PDKV_RETURN_IF_ERROR(r.u32(&h.count));
  PDKV_RETURN_IF_ERROR(r.bytes(&h.message));
  if (ok > 1) return data_loss("device-handle table: bad flag");
  if (r.remaining() != 0) return data_loss("device-handle table: trailing bytes");
  if (h.count > kMaxExportedPieces) return data_loss("device-handle table: too many pieces");
  h.ok = ok == 1;
  return h;
}

void encode_entry(const HandleEntry& e, std::vector<uint8_t>* out) {
  lease::Writer w(*out);
  w.u8(static_cast<uint8_t>(e.kind));
  w.u64(e.id);
  w.u64(e.base);
  w.u64(e.size);
  out->insert(out->end(), e.device.begin(), e.device.end());
  out->insert(out->end(), e.legacy.begin(), e.legacy.end());
}

Result<HandleEntry> decode_entry(std::span<const uint8_t> record) {
  constexpr size_t kFixed = 1 + 8 * 3;
  if (record.size() != kFixed + 16 + kLegacyHandleBytes) {
    return data_loss("device-handle entry: wrong size");
  }
  lease::Reader r(record.first(kFixed));
  uint8_t kind = 0;
  HandleEntry e;
  PDKV_RETURN_IF_ERROR(r.u8(&kind));
  PDKV_RETURN_IF_ERROR(r.u64(&e.id));
  PDKV_RETURN_IF_ERROR(r.u64(&e.base));
  PDKV_RETURN_IF_ERROR(r.u64(&e.size));
  if (kind != static_cast<uint8_t>(IpcHandleKind::kLegacy) &&
      kind != static_cast<uint8_t>(IpcHandleKind::kPosixFd)) {
    return data_loss("device-handle entry: unknown kind");
  }
  if (e.size == 0 || e.base > std::numeric_limits<uint64_t>::max() - e.size) {
    return data_loss("device-handle entry: empty or overflowing range");
  }
  e.kind = static_cast<IpcHandleKind>(kind);
  std::copy_n(record.begin() + kFixed, 16, e.device.begin());
  std::copy_n(record.begin() + kFixed + 16, kLegacyHandleBytes, e.legacy.begin());
  return e;
}

}  // namespace pdkv::engine::cuda_ipc
