#include "engine/conformance/peer_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

extern char** environ;

namespace pdkv::engine::testing {

PeerProcess::PeerProcess(const std::string& backend, uint64_t region_bytes,
                         const std::string& secret_file) {
  signal(SIGPIPE, SIG_IGN);  // a killed peer must fail a write, not the test process
  const char* dir = std::getenv("PDKV_BIN_DIR");
  std::string bin = std::string(dir ? dir : ".") + "/engine_backend_peer";
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) {
    error_ = "pipe failed";
    return;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  std::string size = std::to_string(region_bytes);
  std::vector<char*> argv{bin.data(), const_cast<char*>(backend.c_str()), size.data(), nullptr};
  // Our environment, with PDKV_SECRET_FILE replaced by the peer's own.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PDKV_SECRET_FILE=", 17) != 0) env_strings.emplace_back(*e);
  }
  if (!secret_file.empty()) env_strings.push_back("PDKV_SECRET_FILE=" + secret_file);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int rc = posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
  if (rc != 0) {
    error_ = "cannot start " + bin;
    pid_ = -1;
    return;
  }
  std::string line = read_line();
  std::istringstream ss(line);
  std::string word;
  ss >> word;
  if (word != "READY") {
    error_ = "peer did not start: " + line;
    return;
  }
  ss >> endpoint_ >> region_addr_ >> region_bytes_;
  ready_ = true;
}

PeerProcess::~PeerProcess() {
  if (pid_ > 0) {
    command("EXIT");
    close(to_child_);
    to_child_ = -1;
    int status = 0;
    // A peer stuck in shutdown must not hang the test run.
    for (int i = 0; i < 500 && waitpid(pid_, &status, WNOHANG) == 0; ++i) usleep(10000);
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
}

std::string PeerProcess::read_line() {
  for (;;) {
    auto nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    char buf[256];
    ssize_t n = read(from_child_, buf, sizeof(buf));
    if (n <= 0) return "";
    pending_.append(buf, static_cast<size_t>(n));
  }
}

std::string PeerProcess::command(const std::string& line) {
  if (pid_ <= 0 || to_child_ < 0) return "";
  std::string l = line + "\n";
  if (write(to_child_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) return "";
  if (line == "EXIT") return "";
  return read_line();
}

bool PeerProcess::hash(uint64_t* hash, bool* canaries_ok) {
  std::istringstream ss(command("HASH"));
  std::string word;
  int canaries = 0;
  ss >> word >> *hash >> canaries;
  *canaries_ok = canaries == 1;
  return word == "HASH";
}

void PeerProcess::kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace pdkv::engine::testing
