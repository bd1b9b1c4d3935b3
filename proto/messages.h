// Control-plane messages between prefill and decode ranks, as typed structs.
//
// Every message travels as one ZeroMQ multipart message of exactly two frames:
//   frame 0  header (wire.h): magic "PDKV", protocol version, message type, body length
//   frame 1  body: the fields below in declaration order, encoded with proto/coding.h
//            (fixed-width little-endian integers, u32-counted arrays and strings).
// One body frame (rather than one frame per field, as the reference did) makes a message
// a single sequential record: the decoder checks every count against the bytes left and
// requires the body to be consumed exactly, so there is no positional optional frame and
// no empty-versus-absent ambiguity (the reference read an empty frame as absent in one
// place and as an empty array in another). Optional fields carry a presence
// byte. Limits (kMax*) bound every string and array a peer can make us allocate.
//
// encode_* never fails. decode_* (codec.h) validates everything and returns kDataLoss.
// Thread safety: plain value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace pdkv::proto {

inline constexpr size_t kMaxEndpointBytes = 256;  // "tcp://[v6 addr]:port", session ids
inline constexpr size_t kMaxReasonBytes = 4096;   // failure / abort reasons
inline constexpr size_t kMaxBuffers = 1 << 16;    // KV / aux / state buffers per rank
inline constexpr size_t kMaxLayers = 1 << 16;     // KV layers
inline constexpr size_t kMaxBuffersPerLayer = 4;  // [K, V] or [latent]
inline constexpr size_t kMaxPages = 1 << 24;      // pages (or slots) per request
inline constexpr size_t kMaxFragments = 1 << 16;  // heterogeneous-TP fragments
inline constexpr size_t kMaxSpecCandidates = 1 << 16;
inline constexpr size_t kMaxStateGroups = 64;           // index lists per room (state groups)
inline constexpr size_t kMaxDescriptorBytes = 1 << 20;  // opaque engine memory blob
// [addr, len] words of the regions a checksum covers (2 M regions: page 1, 64 buffers, 32 k
// tokens).
inline constexpr size_t kMaxChecksumRangeWords = 1 << 22;

enum class Role : uint8_t { kPrefill = 0, kDecode = 1 };
inline constexpr uint8_t kMaxRole = 1;

// Who sent a message and where to answer it. One per rank process.
struct RankIdentity {
  Role role = Role::kDecode;
  uint32_t engine_rank = 0;   // global rank in its instance
  uint32_t attn_tp_rank = 0;  // rank inside its DP group
  uint32_t attn_tp_size = 1;
  uint32_t dp_rank = 0;
  uint32_t dp_size = 1;
  // Random per process start: a restarted rank at the same endpoint is a new peer.
  uint64_t incarnation = 0;
  std::string control_endpoint;  // its ZeroMQ PULL, "tcp://host:port": replies go here
  // Its transfer-engine endpoint, what engine::TransferEngine connects to (the reference
  // calls it the "session id"; an engine::SessionId is the handle of one open session to it).
  std::string engine_endpoint;
  bool operator==(const RankIdentity&) const = default;
};

enum class PageLayout : uint8_t { kNHD = 0, kHND = 1 };
inline constexpr uint8_t kMaxPageLayout = 1;

// The layout a prefill must check against its own before writing (the KVArgs fields that
// shape the bytes, docs/API.md).
struct KvLayout {
  uint32_t page_size = 1;  // tokens per page
  uint32_t kv_head_num = 1;
  uint32_t total_kv_head_num = 1;
  uint32_t head_dim = 0;
  uint32_t dtype_bytes = 0;
  PageLayout page_layout = PageLayout::kNHD;
  bool is_mla = false;
  std::vector<std::vector<uint32_t>> layer_buffers;  // KV buffer indices of each KV layer
  std::vector<int32_t> kv_layer_ids;                 // global layer id per KV layer
  // Speculative decoding: KV layers from index target_layer_num on are
  // the draft model's, with their own geometry. target_layer_num 0 = no draft layers;
  // a draft geometry field 0 = the same as the target's.
  uint32_t target_layer_num = 0;
  uint32_t draft_kv_head_num = 0;
  uint32_t draft_total_kv_head_num = 0;
  uint32_t draft_head_dim = 0;
  // State groups (docs/API.md): the group of each state buffer (empty = all 0) and of
  // each KV layer (-1 = the room's chunked pages, g = state group g's list; empty = all
  // -1). Both sides must agree.
  std::vector<int32_t> state_buffer_groups;
  std::vector<int32_t> kv_layer_groups;
  bool operator==(const KvLayout&) const = default;
};

// Base, total bytes and bytes per item (page or slot) of each buffer; equal lengths.
struct BufferSet {
  std::vector<uint64_t> ptrs;
  std::vector<uint64_t> lens;
  std::vector<uint64_t> item_lens;
  bool operator==(const BufferSet&) const = default;
};

enum class BufferKind : uint8_t {
  kTargetK = 0,
  kTargetV = 1,
  kDraftK = 2,
  kDraftV = 3,
  kMambaState = 4,
};
inline constexpr uint8_t kMaxBufferKind = 4;

// One heterogeneous-TP fragment (plan/types.h), a fixed 62-byte record on the wire.
struct Fragment {
  BufferKind buffer_kind = BufferKind::kTargetK;
  uint32_t buffer_index = 0;
  uint32_t src_rank = 0;
  uint32_t dst_rank = 0;
  uint64_t src_page_stride_bytes = 0;
  uint64_t dst_page_stride_bytes = 0;
  uint64_t src_byte_offset = 0;
  uint64_t dst_byte_offset = 0;
  uint64_t bytes_per_page = 0;
  std::optional<uint64_t> page_count;  // pages per run; none = all
  bool operator==(const Fragment&) const = default;
};
inline constexpr size_t kFragmentWireBytes = 1 + 4 * 3 + 8 * 5 + 1 + 8;

// decode -> prefill, once per route before any PreAllocation on the same socket
// (with buffer lengths, which the reference did not send, so prefill can bounds-check
// writes).
struct BufferRegistration {
  RankIdentity decode;
  KvLayout layout;
  BufferSet kv;
  BufferSet aux;
  BufferSet state;
  std::vector<int32_t> state_layer_ids;
  bool enable_mla_l1_5_cache = false;  // decode holds a partial MLA cache
  uint64_t decode_prefix_len = 0;      // tokens
  std::string memory_descriptor;       // opaque engine blob (UCX rkeys), may be empty
  // The heterogeneous-TP fragments of this decode rank for the prefill rank it registers
  // at (empty = default blocks). They depend only on the two layouts, so they travel once
  // here and each PreAllocation names them (fragments_from_registration) instead of
  // carrying its own copy: tens of KB per room for a head split (protocol 6).
  std::vector<Fragment> fragments;
  // Bytes from page i to page i+1 of each KV buffer (empty, or 0 for one = its item
  // length): the prefill addresses the decode's pages with them (protocol 7).
  std::vector<uint64_t> kv_page_strides;
  // The same for each state buffer's slots (protocol 8).
  std::vector<uint64_t> state_page_strides;
  bool operator==(const BufferRegistration&) const = default;
};

// Destination-side L1.5 partial ownership (docs/API.md), mask over the whole request.
struct PageOwnership {
  bool indices_are_local = false;
  std::vector<bool> page_transfer_mask;
  std::vector<int64_t> page_local_indices;
  bool operator==(const PageOwnership&) const = default;
};

enum class PreAllocKind : uint8_t {
  kTransfer = 0,       // write the pages below
  kDummy = 1,          // counts toward required_dst_info_num; send no data to this rank
  kNothingNeeded = 2,  // the room needs nothing from this prefill rank at all
};
inline constexpr uint8_t kMaxPreAllocKind = 2;

// decode -> prefill, per room and target.
struct PreAllocation {
  uint64_t room = 0;
  RankIdentity decode;
  PreAllocKind kind = PreAllocKind::kTransfer;
  std::vector<int64_t> dst_kv_pages;  // after the decode prefix
  std::optional<int64_t> aux_index;   // request-pool slot, when aux buffers exist
  // The room's state-group lists, concatenated: group g is state_slots[ends[g-1], ends[g])
  // (ends[-1] = 0). No ends = one list, the whole of state_slots (protocol < 7's form).
  std::vector<int64_t> state_slots;
  std::vector<uint32_t> state_slot_group_ends;
  // Whether this prefill rank copies the state buffers' slots (it is one of the decode
  // rank's state sources); the lists may travel without it for KV layers of a group.
  bool copy_state_buffers = false;
  uint32_t required_dst_info_num = 1;  // decode ranks that pre-allocate this room here
  uint64_t decode_prefix_len = 0;      // tokens, page-aligned
  // The decode's write grant for this room (engine/write_grant.h): random, sent only to
  // the room's prefill ranks, named on every block they write; the decode's engine admits
  // the room's bytes only under it and revokes it when the room ends. 0 = none (a kDummy
  // or kNothingNeeded rank writes nothing).
  uint64_t write_grant = 0;
  // The room's ticket: random per room and decode rank, sent only in this room's
  // pre-allocations (every kind) and echoed by the prefill on its TransferStatus; the
  // decode counts a status or an Abort of the room only when it carries the ticket, so
  // knowing a room id and a rank number is not enough to end someone else's room.
  uint64_t ticket = 0;
  // The challenge of the prefill's RegistrationResult this decode incarnation was sent
  // (which only a process receiving at the decode's endpoint read): the prefill takes a
  // pre-allocation only with it, so naming a decode's endpoint and incarnation is not
  // enough to pre-allocate, or to replace a live decode by claiming it restarted.
  uint64_t registration_challenge = 0;
  std::optional<PageOwnership> dst_l1_5;
  // true: this room's fragments are those of the registration the challenge answers
  // (BufferRegistration::fragments), and `fragments` is empty.
  bool fragments_from_registration = false;
  std::vector<Fragment> fragments;  // empty = default blocks
  bool operator==(const PreAllocation&) const = default;
};

enum class TransferState : uint8_t { kFailed = 0, kSuccess = 1 };
inline constexpr uint8_t kMaxTransferState = 1;

// prefill -> decode, final status of a room, sent by each prefill rank.
struct TransferStatus {
  uint64_t room = 0;
  TransferState state = TransferState::kFailed;
  uint32_t prefill_engine_rank = 0;
  uint32_t prefill_attn_tp_rank = 0;
  int64_t bootstrap_token = -1;             // first output token, -1 = none
  std::vector<int32_t> spec_candidate_ids;  // empty = none
  std::optional<uint32_t> checksum_crc32c;  // of the bytes written, if computed
  std::string failure_reason;               // empty on success
  // The destination regions checksum_crc32c covers, flattened [addr, len] pairs in the
  // order the bytes were summed (crc32c of their concatenation): the decode re-reads
  // exactly those bytes, after checking that each lies in memory it registered.
  std::vector<uint64_t> checksum_ranges;
  // Failed only: why and where, as kv::FailureCause / kv::FailureStage values (kv/
  // failure_cause.h). Plain bytes here, so the codec accepts any value and a cause this
  // build does not know reads as "internal" in kv instead of failing the message.
  uint8_t failure_cause = 0;
  uint8_t failure_stage = 0;
  uint64_t ticket = 0;  // the ticket of the PreAllocation this status answers
  bool operator==(const TransferStatus&) const = default;
};

// Either direction: the sender gives up on the room.
struct Abort {
  uint64_t room = 0;
  RankIdentity sender;
  std::string reason;
  uint8_t cause = 0;  // why the sender gave up, a kv::FailureCause value (see TransferStatus)
  // The room's ticket (PreAllocation::ticket) when the sender has it: a decode always
  // does; a prefill aborting a room it holds a pre-allocation for echoes it.
  uint64_t ticket = 0;
  bool operator==(const Abort&) const = default;
};

// prefill -> decode, answer to a BufferRegistration: a layout mismatch fails it with a
// reason, so the decode's rooms fail saying why instead of moving bytes to wrong places.
struct RegistrationResult {
  RankIdentity prefill;
  uint64_t decode_incarnation = 0;  // which registration this answers
  bool accepted = false;
  std::string reason;
  uint64_t challenge = 0;  // random; echoed in the decode's pre-allocations (accepted only)
  bool operator==(const RegistrationResult&) const = default;
};

// Per-rank liveness probe: a rank killed while its bootstrap server lives must still be
// detected, so each rank pings its peers rather than the bootstrap server.
// The receiver answers a Ping with a Pong carrying the same seq to ping.sender's endpoint.
struct Ping {
  RankIdentity sender;
  uint64_t seq = 0;
  bool operator==(const Ping&) const = default;
};
struct Pong {
  RankIdentity sender;
  uint64_t seq = 0;  // the Ping's
  bool operator==(const Pong&) const = default;
};

using Message = std::variant<BufferRegistration, PreAllocation, TransferStatus, Abort,
                             RegistrationResult, Ping, Pong>;

}  // namespace pdkv::proto
