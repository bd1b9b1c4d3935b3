// pdkv_engine_peer: a receiving engine in its own process, for multi-process tests and
// `pdkv bench engine` (engine_peer_process.h; its stdin commands: peer_commands.h).
// Engine options come from the PDKV_* environment (EngineOptions::from_env), so the
// parent sets streams and timeouts.
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "engine/testing/device_memory.h"
#include "engine/testing/engine_peer_process.h"
#include "engine/testing/guarded_buffer.h"
#include "engine/testing/peer_commands.h"
#include "engine/testing/vmm_buffer.h"
#include "engine/transfer_engine.h"

using namespace pdkv;
using namespace pdkv::engine;

namespace {

// GRANT opens [offset, offset+length) of the buffer to writes naming grant <id>; REVOKE
// closes it and answers once its writes drained. Answers "OK" or "ERR <status>".
std::string apply_grant(TransferEngine& engine, uint64_t base, const testing::PeerCommand& c) {
  Status st;
  if (c.verb == testing::PeerVerb::kGrant) {
    st = engine.grant_writes(c.id, WriteGrant::of_range(base + c.offset, c.length));
  } else {
    std::promise<void> drained;
    st = engine.revoke_writes(c.id, [&drained] { drained.set_value(); });
    if (st.ok()) drained.get_future().wait();
  }
  return st.ok() ? "OK" : "ERR " + st.to_string();
}

}  // namespace

int main(int argc, char** argv) {
  int fd = -1;
  size_t size = 0;
  // PDKV_PEER_DEVICE=N (test-only): the regions live in device memory of device N.
  int device = -1;
  if (const char* v = std::getenv("PDKV_PEER_DEVICE"); v != nullptr && *v != '\0') {
    device = std::atoi(v);
  }
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
  // The tests and benchmarks driving this peer build their own EngineOptions, whose
  // backend is tcp unless they name one: the same default here.
  ::setenv("PDKV_ENGINE_BACKEND", "tcp", /*overwrite=*/0);
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
  // With PDKV_PEER_DEVICE, one device allocation as large as the shared buffer mirrors it: the
  // regions are registered there (as cuda memory) and UPLOAD / DOWNLOAD copy between them.
  std::unique_ptr<testing::DeviceBuffer> device_buffer;
  // PDKV_PEER_DEVICE_VMM=1 (test-only): that device memory is one cuMemCreate piece
  // (vmm_buffer.h); =pieces: 2 MiB pieces mapped back to back into one reserved range, as
  // PyTorch's expandable segments grow (a region then spans several pieces).
  std::unique_ptr<testing::VmmBuffer> vmm_buffer;
  uint64_t base = (*buffer)->addr();
  const char* vmm = std::getenv("PDKV_PEER_DEVICE_VMM");
  if (device >= 0 && vmm != nullptr && vmm[0] == '1') {
    auto allocated = testing::VmmBuffer::allocate(device, size);
    if (!allocated.ok()) {
      std::fprintf(stderr, "pdkv_engine_peer: %s\n", allocated.status().to_string().c_str());
      return 1;
    }
    vmm_buffer = std::move(*allocated);
    base = vmm_buffer->addr();
  } else if (device >= 0) {
    const bool pieces = vmm != nullptr && std::strcmp(vmm, "pieces") == 0;
    const size_t piece = 2u << 20;
    auto allocated = pieces ? testing::DeviceBuffer::allocate_mapped_pieces(
                                  device, piece, (size + piece - 1) / piece)
                            : testing::DeviceBuffer::allocate(device, size);
    if (!allocated.ok()) {
      std::fprintf(stderr, "pdkv_engine_peer: %s\n", allocated.status().to_string().c_str());
      return 1;
    }
    device_buffer = std::move(*allocated);
    base = device_buffer->addr();
  }
  for (const auto& r : regions) {
    Status st = (*engine)->register_memory(base + r.offset, r.length, MemoryAccess::kPeerWritable,
                                           device >= 0 ? MemoryKind::kCuda : MemoryKind::kAuto);
    if (!st.ok()) {
      std::fprintf(stderr, "pdkv_engine_peer: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  // Test-only: "another host" for the path choice. The engine's listeners stay in the
  // namespace they were bound in (so peers still reach it), while this process (its main
  // thread, which /proc/<pid>/ns shows) moves to a fresh network namespace.
  if (const char* v = std::getenv("PDKV_PEER_UNSHARE_NET"); v != nullptr && v[0] == '1') {
    if (::unshare(CLONE_NEWNET) != 0) {
      std::fprintf(stderr, "pdkv_engine_peer: unshare(CLONE_NEWNET): %s\n", std::strerror(errno));
      return 1;
    }
  }
  std::cout << "READY " << (*engine)->endpoint() << " " << std::hex << base << std::dec
            << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    Result<testing::PeerCommand> command = testing::parse_peer_command(line);
    if (!command.ok()) {
      std::cout << "ERR " << command.status().to_string() << std::endl;
      continue;
    }
    switch (command->verb) {
      case testing::PeerVerb::kPing: std::cout << "PONG" << std::endl; break;
      case testing::PeerVerb::kQuit: return 0;
      case testing::PeerVerb::kGrant:
      case testing::PeerVerb::kRevoke:
        std::cout << apply_grant(**engine, base, *command) << std::endl;
        break;
      case testing::PeerVerb::kUpload:
      case testing::PeerVerb::kDownload: {
        const bool up = command->verb == testing::PeerVerb::kUpload;
        Status st = vmm_buffer != nullptr ? (up ? vmm_buffer->upload(0, (*buffer)->data(), size)
                                                : vmm_buffer->download(0, (*buffer)->data(), size))
                    : device_buffer == nullptr
                        ? failed_precondition("this peer has no device buffer (--device)")
                    : up ? device_buffer->upload(0, (*buffer)->data(), size)
                         : device_buffer->download(0, (*buffer)->data(), size);
        std::cout << (st.ok() ? "OK" : "ERR " + st.to_string()) << std::endl;
        break;
      }
      case testing::PeerVerb::kHash:
      case testing::PeerVerb::kUnregister:
      case testing::PeerVerb::kPush:
        std::cout << "ERR this peer has no " << line << " command" << std::endl;
        break;
    }
  }
  return 0;
}
