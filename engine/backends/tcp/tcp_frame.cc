#include "engine/backends/tcp/tcp_frame.h"

#include <fmt/format.h>

namespace pdkv::engine::tcp {

void put_u32(uint8_t* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{in[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{in[i]} << (8 * i);
  return v;
}

void encode_header(const FrameHeader& h, uint8_t* out) {
  put_u32(out, kMagic);
  out[4] = kVersion;
  out[5] = static_cast<uint8_t>(h.type);
  out[6] = static_cast<uint8_t>(h.flags);
  out[7] = static_cast<uint8_t>(h.flags >> 8);
  put_u64(out + 8, h.part_id);
  put_u32(out + 16, h.count);
  put_u32(out + 20, h.aux);
  put_u64(out + 24, h.payload_bytes);
}

Result<FrameHeader> decode_header(std::span<const uint8_t> bytes, uint32_t max_part_entries) {
  if (bytes.size() < kHeaderSize) return data_loss("frame header truncated");
  const uint8_t* p = bytes.data();
  if (get_u32(p) != kMagic) return data_loss(fmt::format("bad frame magic {:#x}", get_u32(p)));
  if (p[4] != kVersion) return data_loss(fmt::format("unsupported frame version {}", p[4]));
  FrameHeader h;
  h.flags = static_cast<uint16_t>(p[6] | (p[7] << 8));
  if (h.flags != 0 &&
      !(p[5] == static_cast<uint8_t>(FrameType::kPart) && h.flags == kPartHasNote)) {
    return data_loss(fmt::format("frame flags {:#x} not allowed here", h.flags));
  }
  h.part_id = get_u64(p + 8);
  h.count = get_u32(p + 16);
  h.aux = get_u32(p + 20);
  h.payload_bytes = get_u64(p + 24);
  switch (p[5]) {
    case static_cast<uint8_t>(FrameType::kHello):
    case static_cast<uint8_t>(FrameType::kHelloAck):
      h.type = static_cast<FrameType>(p[5]);
      if (h.count != 0 || h.payload_bytes != 0) return data_loss("hello frame with a body");
      return h;
    case static_cast<uint8_t>(FrameType::kAuthHello):
    case static_cast<uint8_t>(FrameType::kAuthChallenge):
    case static_cast<uint8_t>(FrameType::kAuthProof): {
      h.type = static_cast<FrameType>(p[5]);
      const uint32_t body = h.type == FrameType::kAuthHello       ? kAuthHelloBody
                            : h.type == FrameType::kAuthChallenge ? kAuthChallengeBody
                                                                  : kAuthProofBody;
      if (h.count != body || h.payload_bytes != 0 || h.aux != 0 || h.part_id != 0) {
        return data_loss("authentication frame of the wrong shape");
      }
      return h;
    }
    case static_cast<uint8_t>(FrameType::kPart):
      h.type = FrameType::kPart;
      if (h.count == 0) return data_loss("part frame without entries");
      if (h.count > max_part_entries) {
        return data_loss(
            fmt::format("part frame declares {} entries, limit {}", h.count, max_part_entries));
      }
      if ((h.flags & kPartHasNote) != 0) {
        if (h.aux == 0 || h.aux > kMaxNoteBytes) {
          return data_loss(
              fmt::format("part frame note of {} bytes (1..{})", h.aux, kMaxNoteBytes));
        }
      } else if (h.aux != 0) {
        return data_loss("part frame with non-zero aux");
      }
      if (h.payload_bytes < h.count || h.payload_bytes > kMaxPartPayload) {
        return data_loss(fmt::format("part frame payload {} out of range", h.payload_bytes));
      }
      return h;
    case static_cast<uint8_t>(FrameType::kAck):
      h.type = FrameType::kAck;
      if (h.count < kAckFixedSize || h.count > kAckFixedSize + kMaxAckMessage) {
        return data_loss(fmt::format("ack frame body of {} bytes", h.count));
      }
      if (h.aux > static_cast<uint32_t>(StatusCode::kAlreadyCompleted)) {
        return data_loss(fmt::format("ack frame with unknown status code {}", h.aux));
      }
      return h;
    default: return data_loss(fmt::format("unknown frame type {}", p[5]));
  }
}

void encode_entry(const WireEntry& e, uint8_t* out) {
  put_u64(out, e.addr);
  put_u64(out + 8, e.length);
  put_u64(out + 16, e.pieces);
  put_u64(out + 24, e.stride);
  put_u64(out + 32, e.grant);
}

namespace {

// The rules of one entry (tcp_frame.h); `budget` is the payload not yet claimed by
// earlier entries, so pieces x length is bounded before it is computed.
Status check_entry(const WireEntry& e, uint32_t index, uint64_t budget) {
  if (e.length == 0 || e.pieces == 0) {
    return data_loss(
        fmt::format("entry {} has length {} and {} pieces", index, e.length, e.pieces));
  }
  if (e.length > budget || e.pieces > budget / e.length) {
    return data_loss(fmt::format("entry {} exceeds the declared payload", index));
  }
  if (e.pieces == 1 ? e.stride != 0 : e.stride < e.length) {
    return data_loss(fmt::format("entry {} has stride {} for {} pieces of {} bytes", index,
                                 e.stride, e.pieces, e.length));
  }
  // pieces <= budget < 2^46 and stride < 2^64: check the span without overflowing.
  const uint64_t room = UINT64_MAX - e.addr;
  if (e.length > room || (e.pieces > 1 && (e.pieces - 1) > (room - e.length) / e.stride)) {
    return data_loss(fmt::format("entry {} wraps around the address space", index));
  }
  return Status();
}

}  // namespace

Status decode_entries(std::span<const uint8_t> bytes, const FrameHeader& h,
                      std::vector<WireEntry>* out) {
  out->clear();
  if (h.type != FrameType::kPart) return data_loss("entries of a non-part frame");
  if (bytes.size() != uint64_t{h.count} * kEntrySize) return data_loss("entry table size mismatch");
  out->reserve(h.count);
  uint64_t sum = 0;
  for (uint32_t i = 0; i < h.count; ++i) {
    const uint8_t* p = bytes.data() + size_t{i} * kEntrySize;
    WireEntry e{get_u64(p), get_u64(p + 8), get_u64(p + 16), get_u64(p + 24), get_u64(p + 32)};
    PDKV_RETURN_IF_ERROR(check_entry(e, i, h.payload_bytes - sum));
    sum += e.bytes();
    out->push_back(e);
  }
  if (sum != h.payload_bytes) {
    return data_loss(fmt::format("entry bytes sum to {}, payload is {}", sum, h.payload_bytes));
  }
  return Status();
}

std::vector<uint8_t> encode_ack(uint64_t part_id, uint64_t bytes_written, const Status& status,
                                uint64_t entry_index, uint64_t bad_addr) {
  std::string message = status.message();
  if (message.size() > kMaxAckMessage) message.resize(kMaxAckMessage);
  FrameHeader h;
  h.type = FrameType::kAck;
  h.part_id = part_id;
  h.count = static_cast<uint32_t>(kAckFixedSize + message.size());
  h.aux = static_cast<uint32_t>(status.code());
  h.payload_bytes = bytes_written;
  std::vector<uint8_t> out(kHeaderSize + h.count);
  encode_header(h, out.data());
  put_u64(out.data() + kHeaderSize, entry_index);
  put_u64(out.data() + kHeaderSize + 8, bad_addr);
  std::copy(message.begin(), message.end(), out.begin() + kHeaderSize + kAckFixedSize);
  return out;
}

Result<AckBody> decode_ack_body(std::span<const uint8_t> body, const FrameHeader& h) {
  if (h.type != FrameType::kAck || body.size() != h.count || body.size() < kAckFixedSize) {
    return data_loss("ack body size mismatch");
  }
  AckBody a;
  a.entry_index = get_u64(body.data());
  a.bad_addr = get_u64(body.data() + 8);
  a.message.assign(reinterpret_cast<const char*>(body.data() + kAckFixedSize),
                   body.size() - kAckFixedSize);
  return a;
}

}  // namespace pdkv::engine::tcp
