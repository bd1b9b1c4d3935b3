// Shared codec plumbing plus the small messages (status, abort, registration result,
// ping, pong). The two large decode -> prefill messages have their own files.
#include <fmt/format.h>

#include "proto/codec_internal.h"

namespace pdkv::proto {
namespace internal {

Multipart frame(MessageType type, std::string body) {
  Multipart out;
  out.reserve(2);
  out.push_back(encode_header(type, body.size()));
  out.push_back(std::move(body));
  return out;
}

Result<std::string_view> body_of(FrameViews frames, MessageType type) {
  std::string_view name = message_type_name(type);
  if (frames.size() != 2) {
    return data_loss(fmt::format("{}: {} frames, expected 2", name, frames.size()));
  }
  PDKV_ASSIGN_OR_RETURN(Header h, decode_header(frames[0]));
  if (h.type != type) {
    return data_loss(fmt::format("{}: header says {}", name, message_type_name(h.type)));
  }
  if (h.body_bytes != frames[1].size()) {
    return data_loss(fmt::format("{}: body frame is {} bytes, header says {}", name,
                                 frames[1].size(), h.body_bytes));
  }
  return frames[1];
}

void put_identity(std::string* dst, const RankIdentity& id) {
  put_u8(dst, static_cast<uint8_t>(id.role));
  put_u32(dst, id.engine_rank);
  put_u32(dst, id.attn_tp_rank);
  put_u32(dst, id.attn_tp_size);
  put_u32(dst, id.dp_rank);
  put_u32(dst, id.dp_size);
  put_u64(dst, id.incarnation);
  put_bytes(dst, id.control_endpoint);
  put_bytes(dst, id.engine_endpoint);
}

RankIdentity read_identity(WireReader& r) {
  RankIdentity id;
  id.role = read_enum<Role>(r, "identity.role", kMaxRole);
  id.engine_rank = r.u32("identity.engine_rank");
  id.attn_tp_rank = r.u32("identity.attn_tp_rank");
  id.attn_tp_size = r.u32("identity.attn_tp_size");
  id.dp_rank = r.u32("identity.dp_rank");
  id.dp_size = r.u32("identity.dp_size");
  id.incarnation = r.u64("identity.incarnation");
  id.control_endpoint = r.bytes("identity.control_endpoint", kMaxEndpointBytes);
  id.engine_endpoint = r.bytes("identity.engine_endpoint", kMaxEndpointBytes);
  if (!r.ok()) return id;
  if (id.attn_tp_size == 0) r.fail("identity.attn_tp_size", "is 0");
  if (id.dp_size == 0) r.fail("identity.dp_size", "is 0");
  if (id.attn_tp_rank >= id.attn_tp_size) {
    r.fail("identity.attn_tp_rank",
           fmt::format("{} is not below attn_tp_size {}", id.attn_tp_rank, id.attn_tp_size));
  }
  if (id.dp_rank >= id.dp_size) {
    r.fail("identity.dp_rank", fmt::format("{} is not below dp_size {}", id.dp_rank, id.dp_size));
  }
  return id;
}

}  // namespace internal

using namespace internal;  // NOLINT: this file implements them

std::vector<std::string_view> views_of(const Multipart& frames) {
  return {frames.begin(), frames.end()};
}

MessageType type_of(const Message& msg) {
  static constexpr MessageType kTypes[] = {MessageType::kBufferRegistration,
                                           MessageType::kPreAllocation,
                                           MessageType::kTransferStatus,
                                           MessageType::kAbort,
                                           MessageType::kRegistrationResult,
                                           MessageType::kPing,
                                           MessageType::kPong};
  static_assert(std::size(kTypes) == std::variant_size_v<Message>);
  return kTypes[msg.index()];
}

Multipart encode_message(const Message& msg) {
  return std::visit([](const auto& m) { return encode(m); }, msg);
}

Result<Message> decode_message(FrameViews frames) {
  if (frames.empty()) return data_loss("message: no frames");
  PDKV_ASSIGN_OR_RETURN(Header h, decode_header(frames[0]));
  auto wrap = [](auto result) -> Result<Message> {
    if (!result.ok()) return result.status();
    return Message(std::move(result).value());
  };
  switch (h.type) {
    case MessageType::kBufferRegistration: return wrap(decode_buffer_registration(frames));
    case MessageType::kPreAllocation: return wrap(decode_pre_allocation(frames));
    case MessageType::kTransferStatus: return wrap(decode_transfer_status(frames));
    case MessageType::kAbort: return wrap(decode_abort(frames));
    case MessageType::kRegistrationResult: return wrap(decode_registration_result(frames));
    case MessageType::kPing: return wrap(decode_ping(frames));
    case MessageType::kPong: return wrap(decode_pong(frames));
  }
  return data_loss("message: unknown type");
}

std::string encode_flat(const Message& msg) {
  Multipart frames = encode_message(msg);
  return frames.at(0) + frames.at(1);
}

Result<Message> decode_flat(std::string_view bytes) {
  if (bytes.size() < kHeaderBytes) return data_loss("flat message: shorter than its header");
  const std::string_view frames[2] = {bytes.substr(0, kHeaderBytes), bytes.substr(kHeaderBytes)};
  return decode_message(frames);
}

// ---- TransferStatus ----

Multipart encode(const TransferStatus& m) {
  std::string b;
  put_u64(&b, m.room);
  put_u8(&b, static_cast<uint8_t>(m.state));
  put_u32(&b, m.prefill_engine_rank);
  put_u32(&b, m.prefill_attn_tp_rank);
  put_i64(&b, m.bootstrap_token);
  put_array<int32_t>(&b, m.spec_candidate_ids);
  put_optional(&b, m.checksum_crc32c);
  put_bytes(&b, m.failure_reason);
  put_array<uint64_t>(&b, m.checksum_ranges);
  put_u8(&b, m.failure_cause);
  put_u8(&b, m.failure_stage);
  put_u64(&b, m.ticket);
  return frame(MessageType::kTransferStatus, std::move(b));
}

Result<TransferStatus> decode_transfer_status(FrameViews frames) {
  PDKV_ASSIGN_OR_RETURN(std::string_view body, body_of(frames, MessageType::kTransferStatus));
  WireReader r("TransferStatus", body);
  TransferStatus m;
  m.room = r.u64("room");
  m.state = read_enum<TransferState>(r, "state", kMaxTransferState);
  m.prefill_engine_rank = r.u32("prefill_engine_rank");
  m.prefill_attn_tp_rank = r.u32("prefill_attn_tp_rank");
  m.bootstrap_token = r.i64("bootstrap_token");
  m.spec_candidate_ids = r.array<int32_t>("spec_candidate_ids", kMaxSpecCandidates);
  m.checksum_crc32c = read_optional<uint32_t>(r, "checksum_crc32c");
  m.failure_reason = r.bytes("failure_reason", kMaxReasonBytes);
  m.checksum_ranges = r.array<uint64_t>("checksum_ranges", kMaxChecksumRangeWords);
  m.failure_cause = r.u8("failure_cause");
  m.failure_stage = r.u8("failure_stage");
  m.ticket = r.u64("ticket");
  if (r.ok() && m.bootstrap_token < -1) {
    r.fail("bootstrap_token",
           fmt::format("{} is negative (only -1 means none)", m.bootstrap_token));
  }
  if (r.ok() && m.checksum_ranges.size() % 2 != 0) {
    r.fail("checksum_ranges",
           fmt::format("{} words is not a list of [addr, len] pairs", m.checksum_ranges.size()));
  }
  if (r.ok() && !m.checksum_ranges.empty() && !m.checksum_crc32c) {
    r.fail("checksum_ranges", "regions are listed but no checksum covers them");
  }
  PDKV_RETURN_IF_ERROR(r.finish());
  return m;
}

// ---- Abort ----

Multipart encode(const Abort& m) {
  std::string b;
  put_u64(&b, m.room);
  put_identity(&b, m.sender);
  put_bytes(&b, m.reason);
  put_u8(&b, m.cause);
  put_u64(&b, m.ticket);
  return frame(MessageType::kAbort, std::move(b));
}

Result<Abort> decode_abort(FrameViews frames) {
  PDKV_ASSIGN_OR_RETURN(std::string_view body, body_of(frames, MessageType::kAbort));
  WireReader r("Abort", body);
  Abort m;
  m.room = r.u64("room");
  m.sender = read_identity(r);
  m.reason = r.bytes("reason", kMaxReasonBytes);
  m.cause = r.u8("cause");
  m.ticket = r.u64("ticket");
  PDKV_RETURN_IF_ERROR(r.finish());
  return m;
}

// ---- RegistrationResult ----

Multipart encode(const RegistrationResult& m) {
  std::string b;
  put_identity(&b, m.prefill);
  put_u64(&b, m.decode_incarnation);
  put_bool(&b, m.accepted);
  put_bytes(&b, m.reason);
  put_u64(&b, m.challenge);
  return frame(MessageType::kRegistrationResult, std::move(b));
}

Result<RegistrationResult> decode_registration_result(FrameViews frames) {
  PDKV_ASSIGN_OR_RETURN(std::string_view body, body_of(frames, MessageType::kRegistrationResult));
  WireReader r("RegistrationResult", body);
  RegistrationResult m;
  m.prefill = read_identity(r);
  m.decode_incarnation = r.u64("decode_incarnation");
  m.accepted = r.boolean("accepted");
  m.reason = r.bytes("reason", kMaxReasonBytes);
  m.challenge = r.u64("challenge");
  PDKV_RETURN_IF_ERROR(r.finish());
  return m;
}

// ---- Ping / Pong ----

namespace {
template <typename T>
Multipart encode_probe(MessageType type, const T& m) {
  std::string b;
  put_identity(&b, m.sender);
  put_u64(&b, m.seq);
  return frame(type, std::move(b));
}

template <typename T>
Result<T> decode_probe(FrameViews frames, MessageType type) {
  PDKV_ASSIGN_OR_RETURN(std::string_view body, body_of(frames, type));
  WireReader r(message_type_name(type), body);
  T m;
  m.sender = read_identity(r);
  m.seq = r.u64("seq");
  PDKV_RETURN_IF_ERROR(r.finish());
  return m;
}
}  // namespace

Multipart encode(const Ping& m) { return encode_probe(MessageType::kPing, m); }
Multipart encode(const Pong& m) { return encode_probe(MessageType::kPong, m); }
Result<Ping> decode_ping(FrameViews frames) {
  return decode_probe<Ping>(frames, MessageType::kPing);
}
Result<Pong> decode_pong(FrameViews frames) {
  return decode_probe<Pong>(frames, MessageType::kPong);
}

}  // namespace pdkv::proto
