// engine_backend_peer: a receiving engine backend in its own process, for cross-process
// tests. Usage: engine_backend_peer <backend> <region_bytes>
// With PDKV_SECRET_FILE set its sessions require that cluster secret.
// Prints "READY <endpoint> <region_addr> <region_bytes>" and then answers the commands of
// engine/testing/peer_commands.h on stdin:
//   HASH  -> "HASH <fnv64 of region> <canaries 1|0>"
//   UNREG -> "UNREG <status>" (unregisters the region)
//   GRANT <id> <offset> <length> -> "GRANT <status>": from now on writes are admitted only
//     under write grants (memory_registry.h); this one opens that part of the region
//   REVOKE <id> -> "REVOKE <status>" once the grant's admitted writes landed
//   PUSH <endpoint> <dst> <length> <rounds> -> "PUSH <status>": as a sender, writes the
//     first <length> bytes of the region (now all kPushPattern) to <dst> at <endpoint>
//     <rounds> times, all posted at once; answered when the last completed
//   PING  -> "PONG"
//   EXIT or QUIT -> exits 0; a line that does not parse -> "ERR <status>"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <span>
#include <string>

#include "engine/conformance/backend_harness.h"
#include "engine/testing/peer_commands.h"

using namespace pdkv::engine::testing;

namespace {

pdkv::Status push(BackendBox& box, GuardedRegion& region, const PeerCommand& c) {
  if (c.length == 0 || c.length > region.length() || c.rounds == 0) {
    return pdkv::invalid_argument("PUSH needs 0 < length <= the region and rounds > 0");
  }
  std::memset(region.data(), kPushPattern, c.length);
  auto peer = box.backend->connect(c.endpoint);
  if (!peer.ok()) return peer.status();
  const pdkv::engine::WriteBlock block{reinterpret_cast<uint64_t>(region.data()), c.dst, c.length};
  // Tokens above any the sink saw: every PUSH starts a fresh range.
  static uint64_t next_token = 1;
  const uint64_t first = next_token;
  for (uint64_t i = 0; i < c.rounds; ++i) {
    PDKV_RETURN_IF_ERROR(box.backend->post(**peer, std::span(&block, 1), next_token++));
  }
  pdkv::Status last;
  for (uint64_t t = first; t < next_token; ++t) {
    pdkv::Status st = box.sink.wait(t, std::chrono::milliseconds(60000));
    if (!st.ok() && last.ok()) last = st;
  }
  return last;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <backend> <region_bytes>\n", argv[0]);
    return 2;
  }
  auto key = pdkv::ClusterKey::from_env();
  if (!key.ok()) {
    std::printf("ERROR %s\n", key.status().to_string().c_str());
    return 1;
  }
  auto box = make_named_backend(argv[1], *key);
  if (!box.ok()) {
    std::printf("ERROR %s\n", box.status().to_string().c_str());
    return 1;
  }
  GuardedRegion region(std::strtoull(argv[2], nullptr, 10));
  auto addr = reinterpret_cast<uint64_t>(region.data());
  pdkv::Status st = (*box)->registry.add(addr, region.length());
  if (st.ok()) st = (*box)->backend->on_register_memory(addr, region.length());
  if (!st.ok()) {
    std::printf("ERROR %s\n", st.to_string().c_str());
    return 1;
  }
  std::printf("READY %s %llu %llu\n", (*box)->endpoint.c_str(),
              static_cast<unsigned long long>(addr),
              static_cast<unsigned long long>(region.length()));
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    pdkv::Result<PeerCommand> c = parse_peer_command(line);
    if (!c.ok()) {
      std::printf("ERR %s\n", c.status().to_string().c_str());
      std::fflush(stdout);
      continue;
    }
    if (c->verb == PeerVerb::kQuit) break;
    switch (c->verb) {
      case PeerVerb::kHash:
        std::printf("HASH %llu %d\n",
                    static_cast<unsigned long long>(fnv64(region.data(), region.length())),
                    region.canaries_intact() ? 1 : 0);
        break;
      case PeerVerb::kUnregister: {
        // Registry first: remove() waits for granted leases, so the UCX hook unmaps only
        // memory no put can still target.
        pdkv::Status s = (*box)->registry.remove(addr);
        if (s.ok()) s = (*box)->backend->on_unregister_memory(addr, region.length());
        std::printf("UNREG %s\n", s.to_string().c_str());
        break;
      }
      case PeerVerb::kGrant: {
        (*box)->registry.set_require_grants(true);
        pdkv::Status s = (*box)->registry.add_grant(
            c->id, pdkv::engine::WriteGrant::of_range(addr + c->offset, c->length));
        std::printf("GRANT %s\n", s.to_string().c_str());
        break;
      }
      case PeerVerb::kRevoke: {
        std::promise<void> drained;
        pdkv::Status s = (*box)->registry.revoke_grant(c->id, [&drained] { drained.set_value(); });
        if (s.ok()) drained.get_future().wait();
        std::printf("REVOKE %s\n", s.to_string().c_str());
        break;
      }
      case PeerVerb::kPush: {
        std::printf("PUSH %s\n", push(**box, region, *c).to_string().c_str());
        break;
      }
      case PeerVerb::kPing: std::printf("PONG\n"); break;
      case PeerVerb::kQuit: break;
    }
    std::fflush(stdout);
  }
  return 0;
}
