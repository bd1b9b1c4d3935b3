// Frame 0 of every control-plane message: a fixed 16-byte header.
//
//   offset 0  4 bytes  magic "PDKV"
//          4  u16      protocol version (kProtocolVersion)
//          6  u16      message type (MessageType)
//          8  u32      body length: the exact size of frame 1
//         12  u32      flags, reserved, must be 0 (a peer that sets one speaks a dialect
//                      we do not know, so it is rejected rather than half-understood)
// Integers little-endian (coding.h). The header is decoded field by field, never cast.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pdkv::proto {

inline constexpr char kMagic[4] = {'P', 'D', 'K', 'V'};
// Bump on any change to a body layout; peers of another version are rejected.
// 2: TransferStatus.checksum_ranges; 3: failure causes in TransferStatus and Abort;
// 4: PreAllocation.write_grant; 5: room tickets in PreAllocation, TransferStatus, Abort,
// and the registration challenge (RegistrationResult, echoed in PreAllocation);
// 6: BufferRegistration.fragments, PreAllocation.fragments_from_registration;
// 7: state groups (KvLayout.state_buffer_groups / kv_layer_groups, PreAllocation's
// state_slot_group_ends and copy_state_buffers) and BufferRegistration.kv_page_strides;
// 8: BufferRegistration.state_page_strides.
inline constexpr uint16_t kProtocolVersion = 8;
inline constexpr size_t kHeaderBytes = 16;
// Bodies are bounded so a receiver can cap ZMQ_MAXMSGSIZE; 16 M pages of i64 fit.
inline constexpr uint64_t kMaxBodyBytes = uint64_t{256} << 20;

enum class MessageType : uint16_t {
  kBufferRegistration = 1,
  kPreAllocation = 2,
  kTransferStatus = 3,
  kAbort = 4,
  kRegistrationResult = 5,
  kPing = 6,
  kPong = 7,
};
inline constexpr uint16_t kMinMessageType = 1;
inline constexpr uint16_t kMaxMessageType = 7;

std::string_view message_type_name(MessageType type);

struct Header {
  uint16_t version = kProtocolVersion;
  MessageType type = MessageType::kPing;
  uint32_t body_bytes = 0;
  uint32_t flags = 0;
};

std::string encode_header(MessageType type, size_t body_bytes);

// kDataLoss unless `frame` is exactly kHeaderBytes with the magic, our version (the
// message names both versions otherwise), a known type and zero flags.
Result<Header> decode_header(std::string_view frame);

}  // namespace pdkv::proto
