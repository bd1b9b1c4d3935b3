// Payloads of the path channel (path_channel.h), carried in lease-channel frames
// (engine/lease/wire.h: kPathHello, kPathChoice), as pure encode/decode functions so the
// decoders facing the network are fuzzed (engine/lease/lease_wire_fuzzer.cc). Fields in
// order, little-endian, `str` = u32 length + bytes:
//   kPathHello   u32 version, str endpoint, str boot_id, u64 net_ns, u64 pid_ns, u32 pid,
//                str challenge (exactly 32 bytes), u64 proof_addr, u8 device_destinations,
//                u32 n, n x (str backend, str endpoint, u8 device_destination)
//   kPathChoice  u8 path (PathKind), str why (the reasons faster paths were not possible)
// Bounds checked before anything is allocated: at most kMaxPathOffers offers, names and
// reasons of bounded length. Decoders are strict (no trailing bytes, flags 0/1), so an
// accepted payload re-encodes to the same bytes.
//
// Thread safety: pure functions; encode_* append to *out.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/path/locality.h"
#include "engine/path/path_kind.h"

namespace pdkv::engine {

// 1: the first path channel (locality proof, offers, the sender's choice).
inline constexpr uint32_t kPathProtocolVersion = 1;
inline constexpr size_t kMaxPathOffers = 8;
inline constexpr size_t kMaxPathNameBytes = 32;
inline constexpr size_t kMaxPathEndpointBytes = 512;
inline constexpr size_t kMaxPathReasonBytes = 4096;

// One backend an engine offers to its peers, at the endpoint it listens on.
struct PathOffer {
  std::string backend;  // "tcp", "shm", "ucx", ...
  std::string endpoint;
  bool device_destination = false;  // can write into this engine's device memory
  bool operator==(const PathOffer&) const = default;
};

struct PathHello {
  uint32_t version = kPathProtocolVersion;
  std::string endpoint;  // the speaker's engine endpoint (its path channel)
  Locality locality;
  // Sender: a fresh challenge for the receiver's proof slot. Receiver: the challenge it
  // copied into its slot (the sender compares what it reads with what it sent).
  LocalityChallenge challenge{};
  uint64_t proof_addr = 0;  // receiver: where its slot is; sender: 0
  // Receiver: peer-writable device memory is registered (tcp stages it, shm cannot write it).
  bool device_destinations = false;
  std::vector<PathOffer> offers;
};

struct PathChoice {
  PathKind path = PathKind::kTcp;
  std::string why;  // why no faster path was possible ("" when the fastest was)
};

void encode_path_hello(const PathHello& m, std::vector<uint8_t>* out);
Result<PathHello> decode_path_hello(std::span<const uint8_t> payload);

void encode_path_choice(const PathChoice& m, std::vector<uint8_t>* out);
Result<PathChoice> decode_path_choice(std::span<const uint8_t> payload);

}  // namespace pdkv::engine
