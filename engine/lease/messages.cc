#include "engine/lease/messages.h"

#include <algorithm>
#include <climits>

#include "engine/lease/wire.h"

namespace pdkv::engine::lease {
namespace {

// Smallest encoding of one item, so a declared count is checked against the bytes
// present before anything is allocated for it.
constexpr size_t kRangeBytes = 24;
constexpr size_t kMinRegionBytes = 8 + 8 + 4;

Status expect_end(const Reader& in, const char* what) {
  if (in.remaining() != 0) {
    return data_loss(std::string(what) + " carries " + std::to_string(in.remaining()) +
                     " trailing bytes");
  }
  return Status();
}

Status read_flag(Reader& in, bool* v, const char* what) {
  uint8_t b = 0;
  PDKV_RETURN_IF_ERROR(in.u8(&b));
  if (b > 1) return data_loss(std::string(what) + " flag is " + std::to_string(b) + ", not 0/1");
  *v = b != 0;
  return Status();
}

}  // namespace

void encode_hello(const Hello& m, std::vector<uint8_t>* out) {
  Writer w(*out);
  w.bytes(m.backend);
  w.bytes(m.host_identity);
}

Result<Hello> decode_hello(std::span<const uint8_t> payload) {
  Reader in(payload);
  Hello m;
  PDKV_RETURN_IF_ERROR(in.bytes(&m.backend));
  PDKV_RETURN_IF_ERROR(in.bytes(&m.host_identity));
  PDKV_RETURN_IF_ERROR(expect_end(in, "hello"));
  return m;
}

void encode_hello_ack(const HelloAck& m, std::vector<uint8_t>* out) {
  Writer w(*out);
  w.u8(m.ok ? 1 : 0);
  w.bytes(m.message);
  w.u32(m.pid);
  w.bytes(m.host_identity);
  w.u32(m.lease_ms);
  w.bytes(m.extra);
}

Result<HelloAck> decode_hello_ack(std::span<const uint8_t> payload) {
  Reader in(payload);
  HelloAck m;
  PDKV_RETURN_IF_ERROR(read_flag(in, &m.ok, "hello ack"));
  PDKV_RETURN_IF_ERROR(in.bytes(&m.message));
  PDKV_RETURN_IF_ERROR(in.u32(&m.pid));
  PDKV_RETURN_IF_ERROR(in.bytes(&m.host_identity));
  PDKV_RETURN_IF_ERROR(in.u32(&m.lease_ms));
  PDKV_RETURN_IF_ERROR(in.bytes(&m.extra));
  PDKV_RETURN_IF_ERROR(expect_end(in, "hello ack"));
  // The sender keeps lease_ms as an int; a larger value would turn negative there and
  // end every lease before it starts.
  if (m.lease_ms > static_cast<uint32_t>(INT_MAX)) {
    return data_loss("hello ack lease of " + std::to_string(m.lease_ms) + " ms");
  }
  return m;
}

void encode_lease(uint64_t part_id, std::span<const uint64_t> dst_ranges,
                  std::vector<uint8_t>* out) {
  out->reserve(out->size() + 12 + dst_ranges.size() * 8);
  Writer w(*out);
  w.u64(part_id);
  w.u32(static_cast<uint32_t>(dst_ranges.size() / 3));
  for (uint64_t v : dst_ranges) w.u64(v);
}

Result<LeaseRequest> decode_lease(std::span<const uint8_t> payload) {
  Reader in(payload);
  LeaseRequest m;
  uint32_t count = 0;
  PDKV_RETURN_IF_ERROR(in.u64(&m.part_id));
  PDKV_RETURN_IF_ERROR(in.u32(&count));
  if (in.remaining() != static_cast<size_t>(count) * kRangeBytes) {
    return data_loss("lease declares " + std::to_string(count) + " ranges but carries " +
                     std::to_string(in.remaining()) + " bytes");
  }
  m.ranges.resize(count);
  for (auto& r : m.ranges) {
    PDKV_RETURN_IF_ERROR(in.u64(&r.addr));
    PDKV_RETURN_IF_ERROR(in.u64(&r.length));
    PDKV_RETURN_IF_ERROR(in.u64(&r.grant));
  }
  return m;
}

void encode_grant(const Grant& m, std::vector<uint8_t>* out) {
  Writer w(*out);
  w.u64(m.part_id);
  w.u8(m.ok ? 1 : 0);
  w.u32(m.bad_index);
  w.u64(m.first_bad);
  w.u64(m.regions_epoch);
  w.bytes(m.message);
}

Result<Grant> decode_grant(std::span<const uint8_t> payload) {
  Reader in(payload);
  Grant m;
  PDKV_RETURN_IF_ERROR(in.u64(&m.part_id));
  PDKV_RETURN_IF_ERROR(read_flag(in, &m.ok, "grant"));
  PDKV_RETURN_IF_ERROR(in.u32(&m.bad_index));
  PDKV_RETURN_IF_ERROR(in.u64(&m.first_bad));
  PDKV_RETURN_IF_ERROR(in.u64(&m.regions_epoch));
  PDKV_RETURN_IF_ERROR(in.bytes(&m.message));
  PDKV_RETURN_IF_ERROR(expect_end(in, "grant"));
  return m;
}

void encode_part_id(uint64_t part_id, std::vector<uint8_t>* out) { Writer(*out).u64(part_id); }

Result<uint64_t> decode_part_id(std::span<const uint8_t> payload) {
  Reader in(payload);
  uint64_t part_id = 0;
  PDKV_RETURN_IF_ERROR(in.u64(&part_id));
  PDKV_RETURN_IF_ERROR(expect_end(in, "done"));
  return part_id;
}

void encode_regions(const RegionTable& m, std::vector<uint8_t>* out) {
  Writer w(*out);
  w.u64(m.epoch);
  w.u32(static_cast<uint32_t>(m.regions.size()));
  for (const auto& r : m.regions) {
    w.u64(r.addr);
    w.u64(r.length);
    w.bytes(r.rkey);
  }
}

Result<RegionTable> decode_regions(std::span<const uint8_t> payload) {
  Reader in(payload);
  RegionTable m;
  uint32_t n = 0;
  PDKV_RETURN_IF_ERROR(in.u64(&m.epoch));
  PDKV_RETURN_IF_ERROR(in.u32(&n));
  if (in.remaining() / kMinRegionBytes < n) {
    return data_loss("region table declares " + std::to_string(n) + " regions but carries " +
                     std::to_string(in.remaining()) + " bytes");
  }
  m.regions.resize(n);
  for (auto& r : m.regions) {
    PDKV_RETURN_IF_ERROR(in.u64(&r.addr));
    PDKV_RETURN_IF_ERROR(in.u64(&r.length));
    PDKV_RETURN_IF_ERROR(in.bytes(&r.rkey));
    if (r.rkey.empty() || r.rkey.size() > kMaxPackedRkeyBytes) {
      return data_loss("region table: an rkey of " + std::to_string(r.rkey.size()) +
                       " bytes (expected 1 to " + std::to_string(kMaxPackedRkeyBytes) + ")");
    }
  }
  PDKV_RETURN_IF_ERROR(expect_end(in, "region table"));
  return m;
}

Status decode_auth_body(std::span<const uint8_t> payload, std::span<uint8_t> out) {
  if (payload.size() != out.size()) {
    return data_loss("authentication message of " + std::to_string(payload.size()) +
                     " bytes (expected " + std::to_string(out.size()) + ")");
  }
  std::copy(payload.begin(), payload.end(), out.begin());
  return Status();
}

void encode_auth_refused(std::string_view reason, std::vector<uint8_t>* out) {
  Writer(*out).bytes(reason.substr(0, kMaxRefusalBytes));
}

Result<std::string> decode_auth_refused(std::span<const uint8_t> payload) {
  Reader in(payload);
  std::string reason;
  PDKV_RETURN_IF_ERROR(in.bytes(&reason));
  PDKV_RETURN_IF_ERROR(expect_end(in, "refusal"));
  if (reason.size() > kMaxRefusalBytes) {
    return data_loss("refusal of " + std::to_string(reason.size()) + " bytes");
  }
  return reason;
}

}  // namespace pdkv::engine::lease
