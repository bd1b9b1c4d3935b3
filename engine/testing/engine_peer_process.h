// EnginePeerProcess: starts `pdkv_engine_peer` (engine_peer_main.cc), a whole receiving
// TransferEngine in a separate process, for multi-process tests and the engine benchmark.
// (Its sibling conformance/backend_peer_process.h runs one bare backend instead.)
//
// The parent creates a GuardedBuffer; the child maps the same memfd, registers the given
// regions (offsets into the buffer) with its own TransferEngine, and prints
// "READY <endpoint> <buffer address>". The parent then writes into the child through the
// engine and checks the bytes directly in the shared buffer. The child's stdin commands
// (PING, GRANT, REVOKE, QUIT) are those of peer_commands.h; it answers PING with "PONG"
// and GRANT / REVOKE with "OK" or "ERR <status>". EOF also ends it.
//
// Thread safety: one thread drives an EnginePeerProcess. Spawning is safe while engine
// threads run (child_process.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/testing/child_process.h"
#include "engine/testing/guarded_buffer.h"

namespace pdkv::engine::testing {

struct PeerRegion {
  uint64_t offset = 0;  // into the shared buffer
  uint64_t length = 0;
};

class EnginePeerProcess {
 public:
  // `env` entries ("PDKV_TCP_STREAMS=2") override the child's inherited environment.
  static Result<std::unique_ptr<EnginePeerProcess>> start(const GuardedBuffer& buffer,
                                                          const std::vector<PeerRegion>& regions,
                                                          const std::vector<std::string>& env = {},
                                                          int ready_timeout_ms = 30000);
  ~EnginePeerProcess();  // QUIT, then SIGKILL if it does not exit within a few seconds
  EnginePeerProcess(const EnginePeerProcess&) = delete;
  EnginePeerProcess& operator=(const EnginePeerProcess&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  // The child's address of buffer offset 0 (its mapping differs from ours).
  uint64_t remote_base() const { return remote_base_; }
  pid_t pid() const { return child_->pid(); }

  // OK if the child answers PONG within timeout_ms.
  Status ping(int timeout_ms = 10000);
  // Write grants of the child's engine (with PDKV_PEER_REQUIRE_GRANTS=1 in `env` it
  // admits writes only under them): opens [offset, offset+length) of the shared buffer to
  // writes naming `id`; revoke_grant returns once the grant's admitted writes landed.
  Status grant(uint64_t id, uint64_t offset, uint64_t length, int timeout_ms = 10000);
  Status revoke_grant(uint64_t id, int timeout_ms = 10000);
  // A child started with PDKV_PEER_DEVICE=N in `env` registers a device buffer that
  // mirrors the shared one (remote_base() is then the device address): upload copies the
  // shared buffer into it, download copies it back into the shared buffer.
  Status device_upload(int timeout_ms = 30000);
  Status device_download(int timeout_ms = 30000);
  void send_signal(int sig) { child_->send_signal(sig); }
  // Waits for the child to exit; returns its raw wait status. DeadlineExceeded if alive.
  Result<int> wait_exit(int timeout_ms) { return child_->wait_exit(timeout_ms); }

 private:
  explicit EnginePeerProcess(std::unique_ptr<ChildProcess> child) : child_(std::move(child)) {}
  // Sends one command line; OK if the child answers "OK", else its error.
  Status command(const std::string& line, int timeout_ms);

  std::unique_ptr<ChildProcess> child_;
  std::string endpoint_;
  uint64_t remote_base_ = 0;
};

}  // namespace pdkv::engine::testing
