// PeerProcess: starts `pdkv_engine_peer` (engine_peer_main.cc) as a separate receiving
// process for multi-process tests and the engine benchmark.
//
// The parent creates a GuardedBuffer; the child maps the same memfd, registers the given
// regions (offsets into the buffer) with its own TransferEngine, and prints
// "READY <endpoint> <buffer address>". The parent then writes into the child through the
// engine and checks the bytes directly in the shared buffer. Commands on the child's
// stdin: "PING" (answered "PONG") and "QUIT"; EOF also ends it.
//
// Thread safety: one thread drives a PeerProcess. Spawning uses fork + exec with only
// async-signal-safe calls in between, so it is safe while engine threads run.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/testing/guarded_buffer.h"

namespace pdkv::engine::testing {

struct PeerRegion {
  uint64_t offset = 0;  // into the shared buffer
  uint64_t length = 0;
};

// $PDKV_BIN_DIR/pdkv_engine_peer, else the directory of the running executable.
std::string peer_binary_path();

class PeerProcess {
 public:
  // `env` entries ("PDKV_TCP_STREAMS=2") are added to the child's environment.
  static Result<std::unique_ptr<PeerProcess>> start(const GuardedBuffer& buffer,
                                                    const std::vector<PeerRegion>& regions,
                                                    const std::vector<std::string>& env = {},
                                                    int ready_timeout_ms = 30000);
  ~PeerProcess();  // QUIT, then SIGKILL if it does not exit within a few seconds
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  // The child's address of buffer offset 0 (its mapping differs from ours).
  uint64_t remote_base() const { return remote_base_; }
  pid_t pid() const { return pid_; }

  // OK if the child answers PONG within timeout_ms.
  Status ping(int timeout_ms = 10000);
  // Write grants of the child's engine (with PDKV_PEER_REQUIRE_GRANTS=1 in `env` it
  // admits writes only under them): opens [offset, offset+length) of the shared buffer to
  // writes naming `id`; revoke_grant returns once the grant's admitted writes landed.
  Status grant(uint64_t id, uint64_t offset, uint64_t length, int timeout_ms = 10000);
  Status revoke_grant(uint64_t id, int timeout_ms = 10000);
  void send_signal(int sig);
  // Waits for the child to exit; returns its raw wait status. DeadlineExceeded if alive.
  Result<int> wait_exit(int timeout_ms);

 private:
  PeerProcess() = default;
  Result<std::string> read_line(int timeout_ms);
  // Sends one command line; OK if the child answers "OK", else its error.
  Status command(const std::string& line, int timeout_ms);

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string pending_;
  std::string endpoint_;
  uint64_t remote_base_ = 0;
  bool reaped_ = false;
};

}  // namespace pdkv::engine::testing
