// Wire format of the TCP backend, as pure encode/decode functions (fuzzed by
// tcp_frame_fuzzer.cc). All integers are little-endian, fixed width; no struct is ever
// copied onto the wire, so padding is never protocol.
//
// Every frame starts with a 32-byte header:
//   0 u32 magic "PDKV"   4 u8 version (4)   5 u8 type   6 u16 flags (0 but on PART)
//   8 u64 part_id        16 u32 count       20 u32 aux   24 u64 payload_bytes
// AUTH_HELLO / AUTH_CHALLENGE / AUTH_PROOF (only with a cluster secret, before HELLO;
//   tcp_auth.h): `count` = the body's fixed size (32 / 64 / 32 bytes), payload 0.
// HELLO / HELLO_ACK (connection set-up): count 0, payload 0, aux = stream index.
// PART: `count` entries of 40 bytes {u64 dst_addr, u64 length, u64 pieces, u64 stride,
//   u64 grant} follow, then exactly payload_bytes (= sum of length x pieces) of data,
//   scattered in entry order. An entry is `pieces` writes of `length` bytes at
//   dst_addr + i x stride: one entry carries a whole run of equally spaced blocks (a page
//   of a head-split KV buffer is 16 such blocks), so tables, checks and planning cost per
//   run, not per block. pieces 1 has stride 0; pieces > 1 has stride >= length
//   (ascending, never overlapping). `grant` names the write grant the bytes land under
//   (write_grant.h; 0 = none): a batch may mix rooms, so it travels per entry.
//   PART flags: kPartHasNote, or 0. With it, `aux` (1..kMaxNoteBytes) note bytes follow
//   the entry table, before the data: the batch's note (batch_note.h), delivered once
//   the part's data landed; it travels on the batch's last part only, and a batch with a
//   note keeps all its parts on one stream, so their order is TCP's. Without it aux is 0.
//   (Version 1 had 16-byte entries without pieces/stride, version 2 no grant, version 3
//   no notes.)
// ACK (receiver -> sender, one per PART, in order): aux = StatusCode (0 = applied;
//   OutOfRange = refused, nothing written; AlreadyCompleted = refused because an entry
//   names a grant whose room already succeeded), payload_bytes = bytes written; `count`
//   body bytes follow: u64 entry index and u64 first bad address (meaningful on error),
//   then a message of count-16 bytes. A receiver with no connection slot for a new
//   connection sends one ACK for part 0 (aux = Unavailable, the reason as its message)
//   as its first and only frame, then closes (tcp_auth.h refuse_connection).
//
// decode_* validate before anything is allocated or read further: magic, version, type,
// flags, count limits, per-type invariants; decode_entries checks the exact size,
// non-zero lengths and piece counts, the stride rules, that no run's extent wraps around
// the address space, and that the bytes sum (overflow-checked) to payload_bytes.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/batch_note.h"
#include "engine/memory_registry.h"

namespace pdkv::engine::tcp {

constexpr uint32_t kMagic = 0x564b4450;  // "PDKV" read as little-endian u32
constexpr uint8_t kVersion = 4;
constexpr uint16_t kPartHasNote = 1;
constexpr size_t kHeaderSize = 32;
constexpr size_t kEntrySize = 40;
constexpr size_t kAckFixedSize = 16;
constexpr uint32_t kMaxAckMessage = 1024;
// A part carries at most 64 TiB: far beyond any KV cache, small enough that no sum of
// lengths below it can overflow with 2^24 entries.
constexpr uint64_t kMaxPartPayload = uint64_t{1} << 46;

enum class FrameType : uint8_t {
  kHello = 1,
  kHelloAck = 2,
  kPart = 3,
  kAck = 4,
  kAuthHello = 5,      // sender -> receiver: its nonce
  kAuthChallenge = 6,  // receiver -> sender: its nonce and its proof
  kAuthProof = 7,      // sender -> receiver: the sender's proof
};
// Body bytes (`count`) of the authentication frames (tcp_auth.h).
constexpr uint32_t kAuthHelloBody = 32;
constexpr uint32_t kAuthChallengeBody = 64;
constexpr uint32_t kAuthProofBody = 32;

struct FrameHeader {
  FrameType type = FrameType::kHello;
  uint16_t flags = 0;  // kPartHasNote on a PART, else 0
  uint64_t part_id = 0;
  uint32_t count = 0;
  uint32_t aux = 0;
  uint64_t payload_bytes = 0;
};

void put_u32(uint8_t* out, uint32_t v);
void put_u64(uint8_t* out, uint64_t v);
uint32_t get_u32(const uint8_t* in);  // unchecked: caller guarantees 4 bytes
uint64_t get_u64(const uint8_t* in);  // unchecked: caller guarantees 8 bytes

// Writes exactly kHeaderSize bytes.
void encode_header(const FrameHeader& header, uint8_t* out);
// DataLoss on short input, bad magic/version/type/flags or violated limits.
Result<FrameHeader> decode_header(std::span<const uint8_t> bytes, uint32_t max_part_entries);

// One entry of a PART's table: `pieces` writes of `length` bytes, the i-th at
// addr + i * stride, under write grant `grant`.
struct WireEntry {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t pieces = 1;
  uint64_t stride = 0;
  uint64_t grant = 0;

  uint64_t bytes() const { return length * pieces; }
  // One past the last byte written (decode_entries guarantees it does not overflow).
  uint64_t extent_end() const { return addr + (pieces - 1) * stride + length; }
};

void encode_entry(const WireEntry& entry, uint8_t* out);  // kEntrySize bytes
// `bytes` must be exactly header.count * kEntrySize. Appends to *out (cleared first).
Status decode_entries(std::span<const uint8_t> bytes, const FrameHeader& header,
                      std::vector<WireEntry>* out);

// Whole ACK frame (header + body) for `part_id`.
std::vector<uint8_t> encode_ack(uint64_t part_id, uint64_t bytes_written, const Status& status,
                                uint64_t entry_index, uint64_t bad_addr);
struct AckBody {
  uint64_t entry_index = 0;
  uint64_t bad_addr = 0;
  std::string message;
};
// `body` is exactly header.count bytes of an ACK.
Result<AckBody> decode_ack_body(std::span<const uint8_t> body, const FrameHeader& header);

}  // namespace pdkv::engine::tcp
