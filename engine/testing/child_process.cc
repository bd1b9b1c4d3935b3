#include "engine/testing/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"

extern char** environ;

namespace pdkv::engine::testing {
namespace {

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

}  // namespace

std::vector<std::string> child_environment(const std::vector<std::string>& overrides,
                                           const std::vector<std::string>& removed) {
  std::vector<std::string> names = removed;
  for (const std::string& o : overrides) names.push_back(name_of(o));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (std::find(names.begin(), names.end(), name_of(entry)) == names.end()) {
      env.push_back(entry);
    }
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

std::string helper_binary_path(const std::string& name) {
  const char* dir = std::getenv("PDKV_BIN_DIR");
  if (dir != nullptr && *dir != '\0') return std::string(dir) + "/" + name;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return name;
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/')) + "/" + name;
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::spawn(const std::vector<std::string>& argv,
                                                          const std::vector<std::string>& env,
                                                          int inherit_fd) {
  if (argv.empty()) return invalid_argument("ChildProcess::spawn: no program");
  // Writing to the stdin of a child that a test killed must not kill us.
  signal(SIGPIPE, SIG_IGN);
  // Everything the child needs is built before fork(): after it, only async-signal-safe
  // calls until exec.
  std::vector<std::string> arg_strings = argv, env_strings = env;
  std::vector<char*> args, envp;
  for (auto& a : arg_strings) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return internal_error("pipe2 failed");
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return internal_error("pipe2 failed");
  }
  pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) close(fd);
    return internal_error(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    if (inherit_fd >= 0) fcntl(inherit_fd, F_SETFD, 0);  // survives exec
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->to_child_ = in_pipe[1];
  child->from_child_ = out_pipe[0];
  return child;
}

ChildProcess::~ChildProcess() {
  if (!reaped_ && pid_ > 0) stop("", 0);
  close_stdin();
  if (from_child_ >= 0) close(from_child_);
}

void ChildProcess::close_stdin() {
  if (to_child_ >= 0) close(to_child_);
  to_child_ = -1;
}

Status ChildProcess::write_line(const std::string& line) {
  const std::string text = line + "\n";
  if (to_child_ < 0 ||
      write(to_child_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return unavailable("child " + std::to_string(pid_) + ": its stdin is closed");
  }
  return Status();
}

Result<std::string> ChildProcess::read_line(int timeout_ms) {
  const TimePoint deadline = now() + Millis(timeout_ms);
  while (true) {
    const size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    const int left = static_cast<int>(
        std::max<int64_t>(0, std::chrono::duration_cast<Millis>(deadline - now()).count()));
    pollfd p{from_child_, POLLIN, 0};
    const int n = poll(&p, 1, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return deadline_exceeded("no line from child " + std::to_string(pid_) + " within " +
                               std::to_string(timeout_ms) + " ms");
    }
    char buf[512];
    const ssize_t got = read(from_child_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return unavailable("child " + std::to_string(pid_) + " closed its stdout");
    pending_.append(buf, static_cast<size_t>(got));
  }
}

Result<std::string> ChildProcess::ask(const std::string& line, int timeout_ms) {
  PDKV_RETURN_IF_ERROR(write_line(line));
  return read_line(timeout_ms);
}

void ChildProcess::send_signal(int sig) {
  if (!reaped_ && pid_ > 0) kill(pid_, sig);
}

Result<int> ChildProcess::wait_exit(int timeout_ms) {
  if (reaped_) return failed_precondition("child " + std::to_string(pid_) + " already reaped");
  const TimePoint deadline = now() + Millis(timeout_ms);
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return status;
    }
    if (r < 0 && errno != EINTR) return internal_error("waitpid failed");
    if (now() >= deadline) return deadline_exceeded("child still running");
    // Child exit has no fd to wait on here; a short poll interval bounds the latency.
    usleep(2000);
  }
}

void ChildProcess::stop(const std::string& quit_line, int grace_ms) {
  if (reaped_ || pid_ <= 0) return;
  if (!quit_line.empty()) (void)write_line(quit_line);
  close_stdin();  // EOF ends a peer that missed the quit line
  if (grace_ms > 0 && wait_exit(grace_ms).ok()) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

}  // namespace pdkv::engine::testing
