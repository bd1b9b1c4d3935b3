// A stranger on a lease port, for tests of the channel's membership check (lease_auth.h):
// raw bytes, plain frames that skip the handshake, and the replay of a member's recorded
// handshake, each followed by what the endpoint answered before it closed.
//
// Thread safety: free functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/cluster_key.h"
#include "common/status.h"
#include "engine/lease/wire.h"

namespace pdkv::engine::lease::testing {

struct Frame {
  MsgType type;
  std::vector<uint8_t> payload;
};

// What an endpoint sent back, and whether it closed the connection within the timeout.
struct Answer {
  std::vector<MsgType> types;  // every whole frame received, in order
  bool closed = false;
  // True if any answer would let a sender write: a hello ack (pid, probe or worker
  // address), a grant or a region table (rkeys).
  bool any_write_material() const;
};

// Sends `bytes` on a fresh connection to `endpoint`, then reads until it is closed or
// `timeout` passes.
Answer send_raw(const std::string& endpoint, std::span<const uint8_t> bytes,
                std::chrono::milliseconds timeout);

std::vector<uint8_t> encode_frames(const std::vector<Frame>& frames);

// What a sender sends once admitted: a hello for `backend`, a region-table request and a
// lease on [dst, dst + length).
std::vector<Frame> hello_and_requests(const std::string& backend, uint64_t dst, uint64_t length);

// The handshake frames (kAuthHello, kAuthProof) a member holding `key` sends in one real
// session with `endpoint`; the session is then closed.
Result<std::vector<Frame>> record_member_handshake(const std::string& endpoint,
                                                   const ClusterKey& key);

}  // namespace pdkv::engine::lease::testing
