// pdkv_engine_peer: a receiving engine in its own process, for multi-process tests and
// `pdkv bench engine` (see peer_client.h for the protocol). Engine options come from the
// PDKV_* environment (EngineOptions::from_env), so the parent sets streams and timeouts.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "engine/testing/guarded_buffer.h"
#include "engine/testing/peer_client.h"
#include "engine/transfer_engine.h"

using namespace pdkv;
using namespace pdkv::engine;

namespace {

// "GRANT <id> <offset> <length>" opens [offset, offset+length) of the buffer to writes
// naming grant <id>; "REVOKE <id>" closes it and answers once its writes drained.
// Answers "OK" or "ERR <status>".
std::string grant_command(TransferEngine& engine, uint64_t base, const std::string& line) {
  std::istringstream in(line);
  std::string verb;
  uint64_t id = 0;
  in >> verb >> id;
  Status st;
  if (verb == "GRANT") {
    uint64_t offset = 0;
    uint64_t length = 0;
    in >> offset >> length;
    st = engine.grant_writes(id, WriteGrant::of_range(base + offset, length));
  } else {
    std::promise<void> drained;
    st = engine.revoke_writes(id, [&drained] { drained.set_value(); });
    if (st.ok()) drained.get_future().wait();
  }
  return st.ok() ? "OK" : "ERR " + st.to_string();
}

}  // namespace

int main(int argc, char** argv) {
  int fd = -1;
  size_t size = 0;
  std::vector<testing::PeerRegion> regions;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--fd") {
      fd = std::atoi(value.c_str());
    } else if (flag == "--size") {
      size = std::strtoull(value.c_str(), nullptr, 10);
    } else if (flag == "--region") {
      const size_t colon = value.find(':');
      regions.push_back({std::strtoull(value.substr(0, colon).c_str(), nullptr, 10),
                         std::strtoull(value.substr(colon + 1).c_str(), nullptr, 10)});
    } else {
      std::fprintf(stderr, "pdkv_engine_peer: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  auto buffer = testing::GuardedBuffer::map_fd(fd, size);
  if (!buffer.ok()) {
    std::fprintf(stderr, "pdkv_engine_peer: %s\n", buffer.status().to_string().c_str());
    return 1;
  }
  auto options = EngineOptions::from_env();
  if (!options.ok()) {
    std::fprintf(stderr, "pdkv_engine_peer: %s\n", options.status().to_string().c_str());
    return 1;
  }
  // Test-only: the receiver admits writes only under grants (GRANT / REVOKE below).
  if (const char* v = std::getenv("PDKV_PEER_REQUIRE_GRANTS"); v != nullptr && v[0] == '1') {
    options->require_write_grants = true;
  }
  auto engine = TransferEngine::create(*options);
  if (!engine.ok()) {
    std::fprintf(stderr, "pdkv_engine_peer: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  for (const auto& r : regions) {
    Status st = (*engine)->register_memory((*buffer)->addr() + r.offset, r.length);
    if (!st.ok()) {
      std::fprintf(stderr, "pdkv_engine_peer: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  std::cout << "READY " << (*engine)->endpoint() << " " << std::hex << (*buffer)->addr() << std::dec
            << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "PING") {
      std::cout << "PONG" << std::endl;
    } else if (line == "QUIT") {
      break;
    } else if (line.rfind("GRANT ", 0) == 0 || line.rfind("REVOKE ", 0) == 0) {
      std::cout << grant_command(**engine, (*buffer)->addr(), line) << std::endl;
    }
  }
  return 0;
}
