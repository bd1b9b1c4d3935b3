#include "engine/testing/peer_client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/clock.h"

extern char** environ;

namespace pdkv::engine::testing {

std::string peer_binary_path() {
  const char* dir = std::getenv("PDKV_BIN_DIR");
  if (dir != nullptr && *dir != '\0') return std::string(dir) + "/pdkv_engine_peer";
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "pdkv_engine_peer";
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/')) + "/pdkv_engine_peer";
}

Result<std::unique_ptr<PeerProcess>> PeerProcess::start(const GuardedBuffer& buffer,
                                                        const std::vector<PeerRegion>& regions,
                                                        const std::vector<std::string>& env,
                                                        int ready_timeout_ms) {
  // Writing to the stdin of a peer that a test killed must not kill us.
  signal(SIGPIPE, SIG_IGN);
  // Everything the child needs is built before fork(): after it, only async-signal-safe
  // calls until exec.
  const std::string binary = peer_binary_path();
  std::vector<std::string> args = {binary, "--fd", std::to_string(buffer.fd()), "--size",
                                   std::to_string(buffer.size())};
  for (const PeerRegion& r : regions) {
    args.push_back("--region");
    args.push_back(std::to_string(r.offset) + ":" + std::to_string(r.length));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const auto& e : env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return internal_error("pipe2 failed");
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return internal_error("pipe2 failed");
  }
  const int memfd = buffer.fd();
  pid_t pid = fork();
  if (pid < 0) return internal_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    fcntl(memfd, F_SETFD, 0);  // the memfd survives exec
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  std::unique_ptr<PeerProcess> p(new PeerProcess());
  p->pid_ = pid;
  p->to_child_ = in_pipe[1];
  p->from_child_ = out_pipe[0];
  Result<std::string> line = p->read_line(ready_timeout_ms);
  if (!line.ok()) return line.status().with_context("peer " + binary + " did not get ready");
  std::istringstream words(*line);
  std::string word;
  words >> word >> p->endpoint_ >> std::hex >> p->remote_base_;
  if (word != "READY" || p->endpoint_.empty()) {
    return internal_error("peer said '" + *line + "' instead of READY");
  }
  return p;
}

PeerProcess::~PeerProcess() {
  if (!reaped_ && pid_ > 0) {
    const char quit[] = "QUIT\n";
    ssize_t n = write(to_child_, quit, sizeof quit - 1);
    (void)n;
    if (!wait_exit(5000).ok()) {
      kill(pid_, SIGKILL);
      (void)wait_exit(30000);
    }
  }
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
}

Result<std::string> PeerProcess::read_line(int timeout_ms) {
  const TimePoint deadline = now() + Millis(timeout_ms);
  while (true) {
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    const int left = static_cast<int>(
        std::max<int64_t>(0, std::chrono::duration_cast<Millis>(deadline - now()).count()));
    pollfd p{from_child_, POLLIN, 0};
    int n = poll(&p, 1, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return deadline_exceeded("no line from peer within " + std::to_string(timeout_ms) + " ms");
    char buf[512];
    ssize_t got = read(from_child_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return unavailable("peer closed its stdout (exited?)");
    pending_.append(buf, static_cast<size_t>(got));
  }
}

Status PeerProcess::ping(int timeout_ms) {
  const char cmd[] = "PING\n";
  if (write(to_child_, cmd, sizeof cmd - 1) != static_cast<ssize_t>(sizeof cmd - 1)) {
    return unavailable("peer stdin closed");
  }
  PDKV_ASSIGN_OR_RETURN(std::string line, read_line(timeout_ms));
  if (line != "PONG") return internal_error("peer answered '" + line + "'");
  return Status();
}

Status PeerProcess::command(const std::string& line, int timeout_ms) {
  const std::string cmd = line + "\n";
  if (write(to_child_, cmd.data(), cmd.size()) != static_cast<ssize_t>(cmd.size())) {
    return unavailable("peer stdin closed");
  }
  PDKV_ASSIGN_OR_RETURN(std::string answer, read_line(timeout_ms));
  if (answer != "OK") return internal_error("peer answered '" + answer + "' to '" + line + "'");
  return Status();
}

Status PeerProcess::grant(uint64_t id, uint64_t offset, uint64_t length, int timeout_ms) {
  return command(
      "GRANT " + std::to_string(id) + " " + std::to_string(offset) + " " + std::to_string(length),
      timeout_ms);
}

Status PeerProcess::revoke_grant(uint64_t id, int timeout_ms) {
  return command("REVOKE " + std::to_string(id), timeout_ms);
}

void PeerProcess::send_signal(int sig) {
  if (!reaped_ && pid_ > 0) kill(pid_, sig);
}

Result<int> PeerProcess::wait_exit(int timeout_ms) {
  const TimePoint deadline = now() + Millis(timeout_ms);
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return status;
    }
    if (r < 0 && errno != EINTR) return internal_error("waitpid failed");
    if (now() >= deadline) return deadline_exceeded("peer still running");
    // Child exit has no fd to wait on here; a short poll interval bounds the latency.
    usleep(2000);
  }
}

}  // namespace pdkv::engine::testing
