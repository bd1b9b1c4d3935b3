// ChildProcess: a helper program of the multi-process tests and benchmarks, started with
// pipes on its stdin and stdout and spoken to in lines. The two peer processes
// (engine_peer_process.h: a whole TransferEngine; conformance/backend_peer_process.h:
// one backend) are built on it; what they say is in peer_commands.h.
//
// Spawning is fork + exec with only async-signal-safe calls in between, so it is safe
// while engine threads run. SIGPIPE is ignored process-wide once a child was spawned: a
// write to a child that died fails with an error instead of killing the caller.
//
// Thread safety: one thread drives a ChildProcess.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace pdkv::engine::testing {

// This process's environment with each `overrides` entry ("NAME=value") replacing any
// entry of the same name (the child sees the override, not the parent's value), and the
// variables named in `removed` left out.
std::vector<std::string> child_environment(const std::vector<std::string>& overrides,
                                           const std::vector<std::string>& removed = {});

// The path of helper `name` next to the test binaries: $PDKV_BIN_DIR/name, else the
// directory of the running executable.
std::string helper_binary_path(const std::string& name);

class ChildProcess {
 public:
  // Starts `argv[0]` (a path) with `argv` and exactly `env`. `inherit_fd` (-1 = none)
  // stays open across exec under the same number. Internal if pipes or fork fail; a
  // binary that cannot be executed exits 127 (seen as a closed stdout).
  static Result<std::unique_ptr<ChildProcess>> spawn(const std::vector<std::string>& argv,
                                                     const std::vector<std::string>& env,
                                                     int inherit_fd = -1);
  // SIGKILL and reap if still running; closes the pipes.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool reaped() const { return reaped_; }

  // Writes `line` and a newline. Unavailable if the child's stdin is closed.
  Status write_line(const std::string& line);
  // The next line without its newline. DeadlineExceeded after `timeout_ms`; Unavailable
  // once the child closed its stdout (it exited).
  Result<std::string> read_line(int timeout_ms);
  // Sends `line` and reads the answer: both of the above.
  Result<std::string> ask(const std::string& line, int timeout_ms);

  void send_signal(int sig);
  // Waits for the child to exit; its raw wait status. DeadlineExceeded if still alive.
  Result<int> wait_exit(int timeout_ms);
  // Ends the child: writes `quit_line` (if not empty), closes its stdin, waits up to
  // `grace_ms` for it to exit, then SIGKILLs it. Always reaps it.
  void stop(const std::string& quit_line, int grace_ms);

 private:
  ChildProcess() = default;
  void close_stdin();

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string pending_;  // bytes read past the last returned line
  bool reaped_ = false;
};

}  // namespace pdkv::engine::testing
