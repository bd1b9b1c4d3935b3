// PeerProcess: starts engine_backend_peer (a receiving backend in its own process) and
// talks to it over its stdin/stdout. kill9() is SIGKILL, for the dead-peer tests.
// Thread safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace pdkv::engine::testing {

class PeerProcess {
 public:
  // Starts `$PDKV_BIN_DIR/engine_backend_peer backend region_bytes` and waits for READY.
  // `secret_file`: its PDKV_SECRET_FILE ("" = none, whatever this process has).
  PeerProcess(const std::string& backend, uint64_t region_bytes,
              const std::string& secret_file = "");
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  bool ready() const { return ready_; }
  const std::string& error() const { return error_; }
  const std::string& endpoint() const { return endpoint_; }
  uint64_t region_addr() const { return region_addr_; }
  uint64_t region_bytes() const { return region_bytes_; }
  pid_t pid() const { return pid_; }

  // Sends a command line and returns the answer line ("" if the process died).
  std::string command(const std::string& line);
  // HASH: fills hash and canaries; false if the peer did not answer.
  bool hash(uint64_t* hash, bool* canaries_ok);
  void kill9();

 private:
  std::string read_line();
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  bool ready_ = false;
  std::string error_;
  std::string endpoint_;
  uint64_t region_addr_ = 0;
  uint64_t region_bytes_ = 0;
  std::string pending_;
};

}  // namespace pdkv::engine::testing
