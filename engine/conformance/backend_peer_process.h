// BackendPeerProcess: starts engine_backend_peer (backend_peer_main.cc: one receiving
// backend, not a whole engine, over a guarded region of its own) and talks to it over its
// stdin/stdout with the commands of engine/testing/peer_commands.h. kill9() is SIGKILL,
// for the dead-peer tests. (Its sibling engine/testing/engine_peer_process.h runs a whole
// TransferEngine over memory shared with the parent.)
// Thread safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/testing/child_process.h"

namespace pdkv::engine::testing {

class BackendPeerProcess {
 public:
  // Starts `$PDKV_BIN_DIR/engine_backend_peer backend region_bytes` and waits for READY.
  // `secret_file`: its PDKV_SECRET_FILE ("" = none, whatever this process has).
  BackendPeerProcess(const std::string& backend, uint64_t region_bytes,
                     const std::string& secret_file = "");
  ~BackendPeerProcess();  // EXIT, then SIGKILL if it does not exit within 5 s
  BackendPeerProcess(const BackendPeerProcess&) = delete;
  BackendPeerProcess& operator=(const BackendPeerProcess&) = delete;

  bool ready() const { return ready_; }
  const std::string& error() const { return error_; }
  const std::string& endpoint() const { return endpoint_; }
  uint64_t region_addr() const { return region_addr_; }
  uint64_t region_bytes() const { return region_bytes_; }
  pid_t pid() const { return child_ ? child_->pid() : -1; }

  // Sends a command line and returns the answer line ("" if the process died or did not
  // answer within a minute).
  std::string command(const std::string& line);
  // Sends a command line without waiting for its answer (to kill the peer while it acts).
  bool start_command(const std::string& line);
  // HASH: fills hash and canaries; false if the peer did not answer.
  bool hash(uint64_t* hash, bool* canaries_ok);
  void kill9();

 private:
  std::unique_ptr<ChildProcess> child_;  // null if it could not be started, or after kill9()
  bool ready_ = false;
  std::string error_;
  std::string endpoint_;
  uint64_t region_addr_ = 0;
  uint64_t region_bytes_ = 0;
};

}  // namespace pdkv::engine::testing
