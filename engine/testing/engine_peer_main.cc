// pdkv_engine_peer: a receiving engine in its own process, for multi-process tests and
// `pdkv bench engine` (see peer_client.h for the protocol). Engine options come from the
// PDKV_* environment (EngineOptions::from_env), so the parent sets streams and timeouts.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "engine/testing/guarded_buffer.h"
#include "engine/testing/peer_client.h"
#include "engine/transfer_engine.h"

using namespace pdkv;
using namespace pdkv::engine;

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
    }
  }
  return 0;
}
