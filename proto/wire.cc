#include "proto/wire.h"

#include <fmt/format.h>

#include <cstring>

#include "proto/coding.h"

namespace pdkv::proto {

std::string_view message_type_name(MessageType type) {
  switch (type) {
    case MessageType::kBufferRegistration: return "BufferRegistration";
    case MessageType::kPreAllocation: return "PreAllocation";
    case MessageType::kTransferStatus: return "TransferStatus";
    case MessageType::kAbort: return "Abort";
    case MessageType::kRegistrationResult: return "RegistrationResult";
    case MessageType::kPing: return "Ping";
    case MessageType::kPong: return "Pong";
  }
  return "Unknown";
}

std::string encode_header(MessageType type, size_t body_bytes) {
  std::string out;
  out.reserve(kHeaderBytes);
  out.append(kMagic, sizeof(kMagic));
  put_u16(&out, kProtocolVersion);
  put_u16(&out, static_cast<uint16_t>(type));
  put_u32(&out, static_cast<uint32_t>(body_bytes));
  put_u32(&out, 0);
  return out;
}

Result<Header> decode_header(std::string_view frame) {
  if (frame.size() != kHeaderBytes) {
    return data_loss(
        fmt::format("header: frame 0 is {} bytes, expected {}", frame.size(), kHeaderBytes));
  }
  if (std::memcmp(frame.data(), kMagic, sizeof(kMagic)) != 0) {
    return data_loss("header: bad magic (not a pdkv control-plane message)");
  }
  Header h;
  h.version = decode_fixed<uint16_t>(frame.data() + 4);
  uint16_t type = decode_fixed<uint16_t>(frame.data() + 6);
  h.body_bytes = decode_fixed<uint32_t>(frame.data() + 8);
  h.flags = decode_fixed<uint32_t>(frame.data() + 12);
  if (h.version != kProtocolVersion) {
    return data_loss(
        fmt::format("header: peer speaks protocol version {}, this build speaks version {}",
                    h.version, kProtocolVersion));
  }
  if (type < kMinMessageType || type > kMaxMessageType) {
    return data_loss(fmt::format("header: unknown message type {}", type));
  }
  h.type = static_cast<MessageType>(type);
  if (h.flags != 0) return data_loss(fmt::format("header: unknown flags 0x{:x}", h.flags));
  if (h.body_bytes > kMaxBodyBytes) {
    return data_loss(
        fmt::format("header: body of {} bytes exceeds the limit {}", h.body_bytes, kMaxBodyBytes));
  }
  return h;
}

}  // namespace pdkv::proto
