// Payloads of the lease channel's frames (wire.h), as pure encode/decode functions, so
// that the decoders facing the network are fuzzed (lease_wire_fuzzer.cc) apart from the
// sockets. Field order and widths per type (all little-endian, `str` = u32 length +
// bytes):
//   kHello     str backend, str host_identity
//   kHelloAck  u8 ok, str message, u32 pid, str host_identity, u32 lease_ms, str extra
//   kLease     u64 part_id, u32 count, count x (u64 dst, u64 length, u64 grant)
//   kGrant     u64 part_id, u8 ok, u32 bad_index, u64 first_bad, u64 epoch, str message
//   kDone, kDoneAck   u64 part_id
//   kRegionsReq       empty
//   kRegions   u64 epoch, u32 n, n x (u64 addr, u64 length, str rkey)   (UCX only)
//              (an rkey holds at most kMaxPackedRkeyBytes)
//   kAuthHello, kAuthChallenge, kAuthProof   the raw handshake body of
//              engine/session_auth.h: exactly 32, 64 and 32 bytes
//   kAuthRefused  str reason (at most kMaxRefusalBytes)
//
// Every decoder takes exactly one payload and returns DataLoss when it is short, carries
// trailing bytes, declares more items than it carries (checked before allocating), or
// holds a flag other than 0/1; so an accepted payload re-encodes to the same bytes.
//
// Thread safety: pure functions. encode_* append to *out.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/memory_registry.h"

namespace pdkv::engine::lease {

struct Hello {
  std::string backend;  // the receiver refuses a sender running another backend
  std::string host_identity;
};

struct HelloAck {
  bool ok = false;
  std::string message;  // why not ok
  uint32_t pid = 0;
  std::string host_identity;
  uint32_t lease_ms = 0;  // at most INT32_MAX (PeerHello holds an int)
  std::string extra;      // backend-specific (LeaseSession::hello_extra)
};

struct LeaseRequest {
  uint64_t part_id = 0;
  std::vector<DstRange> ranges;
};

struct Grant {
  uint64_t part_id = 0;
  bool ok = false;
  uint32_t bad_index = 0;  // index within the part when !ok
  uint64_t first_bad = 0;
  uint64_t regions_epoch = 0;
  std::string message;
};

// A packed UCX rkey is a few dozen bytes per memory domain (ucp_rkey_pack); anything
// beyond this is not one.
inline constexpr size_t kMaxPackedRkeyBytes = 16u << 10;
inline constexpr size_t kMaxRefusalBytes = 1024;

struct RegionEntry {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string rkey;  // packed by ucp_rkey_pack
};

struct RegionTable {
  uint64_t epoch = 0;
  std::vector<RegionEntry> regions;
};

void encode_hello(const Hello& m, std::vector<uint8_t>* out);
Result<Hello> decode_hello(std::span<const uint8_t> payload);

void encode_hello_ack(const HelloAck& m, std::vector<uint8_t>* out);
Result<HelloAck> decode_hello_ack(std::span<const uint8_t> payload);

// `dst_ranges` holds (dst, length, grant) triples; REQUIRES: a multiple of 3 below 3 x 2^32.
void encode_lease(uint64_t part_id, std::span<const uint64_t> dst_ranges,
                  std::vector<uint8_t>* out);
Result<LeaseRequest> decode_lease(std::span<const uint8_t> payload);

void encode_grant(const Grant& m, std::vector<uint8_t>* out);
Result<Grant> decode_grant(std::span<const uint8_t> payload);

// kDone and kDoneAck.
void encode_part_id(uint64_t part_id, std::vector<uint8_t>* out);
Result<uint64_t> decode_part_id(std::span<const uint8_t> payload);

void encode_regions(const RegionTable& m, std::vector<uint8_t>* out);
Result<RegionTable> decode_regions(std::span<const uint8_t> payload);

// The handshake's bodies travel raw: DataLoss unless the payload is exactly out.size().
Status decode_auth_body(std::span<const uint8_t> payload, std::span<uint8_t> out);

// `reason` is cut to kMaxRefusalBytes.
void encode_auth_refused(std::string_view reason, std::vector<uint8_t>* out);
Result<std::string> decode_auth_refused(std::span<const uint8_t> payload);

}  // namespace pdkv::engine::lease
