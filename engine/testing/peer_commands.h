// The stdin commands of the peer processes (engine_peer_main.cc,
// conformance/backend_peer_main.cc), one per line, words separated by spaces, numbers in
// decimal:
//   PING                        -> "PONG"                      (engine peer)
//   HASH                        -> "HASH <fnv64> <canaries 1|0>" (backend peer)
//   UNREG                       -> unregisters the peer's region (backend peer)
//   GRANT <id> <offset> <length> opens [offset, offset+length) of the peer's memory to
//                               writes naming write grant <id> (write_grant.h)
//   REVOKE <id>                 closes grant <id>; answered once its admitted writes landed
//   PUSH <endpoint> <dst> <length> <rounds>
//                               the peer connects to <endpoint> as a sender and writes the
//                               first <length> bytes of its region (filled with
//                               kPushPattern) to <dst> there, <rounds> times (backend peer)
//   UPLOAD / DOWNLOAD           copies the shared buffer into the peer's device buffer /
//                               the device buffer into the shared buffer (engine peer
//                               started with PDKV_PEER_DEVICE: the parent reads and writes
//                               device bytes through the shared buffer)
//   QUIT or EXIT                the peer exits 0 (so does EOF)
// Each peer answers in its own format (see its main); a line that does not parse is
// answered "ERR <status>". Both sides use the functions below, so the peers and their
// drivers agree on one grammar.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pdkv::engine::testing {

enum class PeerVerb {
  kPing,
  kHash,
  kUnregister,
  kGrant,
  kRevoke,
  kPush,
  kUpload,
  kDownload,
  kQuit
};

struct PeerCommand {
  PeerVerb verb = PeerVerb::kPing;
  uint64_t id = 0;         // GRANT, REVOKE
  uint64_t offset = 0;     // GRANT
  uint64_t length = 0;     // GRANT, PUSH
  std::string endpoint{};  // PUSH: host:port, no spaces
  uint64_t dst = 0;        // PUSH: the destination address there
  uint64_t rounds = 0;     // PUSH
};

// The byte a PUSH writes.
inline constexpr uint8_t kPushPattern = 0x5A;

// InvalidArgument naming the problem: an unknown verb, a missing or extra argument, an
// argument that is not a decimal uint64.
Result<PeerCommand> parse_peer_command(std::string_view line);
// The line parse_peer_command() reads back as `command`.
std::string format_peer_command(const PeerCommand& command);

// Convenience constructors for the drivers.
inline PeerCommand grant_command(uint64_t id, uint64_t offset, uint64_t length) {
  return {PeerVerb::kGrant, id, offset, length};
}
inline PeerCommand revoke_command(uint64_t id) { return {PeerVerb::kRevoke, id, 0, 0}; }
inline PeerCommand push_command(const std::string& endpoint, uint64_t dst, uint64_t length,
                                uint64_t rounds) {
  return {PeerVerb::kPush, 0, 0, length, endpoint, dst, rounds};
}

}  // namespace pdkv::engine::testing
