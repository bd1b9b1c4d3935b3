#include "engine/conformance/backend_peer_process.h"

#include <signal.h>

#include <sstream>
#include <vector>

#include "engine/testing/peer_commands.h"

namespace pdkv::engine::testing {
namespace {

// Generous: a peer under a sanitizer, on a loaded machine, starting UCX.
constexpr int kAnswerTimeoutMs = 60000;

}  // namespace

BackendPeerProcess::BackendPeerProcess(const std::string& backend, uint64_t region_bytes,
                                       const std::string& secret_file) {
  const std::string bin = helper_binary_path("engine_backend_peer");
  // Our environment, with PDKV_SECRET_FILE replaced by the peer's own.
  std::vector<std::string> env = secret_file.empty()
                                     ? child_environment({}, {"PDKV_SECRET_FILE"})
                                     : child_environment({"PDKV_SECRET_FILE=" + secret_file});
  auto child = ChildProcess::spawn({bin, backend, std::to_string(region_bytes)}, env);
  if (!child.ok()) {
    error_ = "cannot start " + bin + ": " + child.status().to_string();
    return;
  }
  child_ = std::move(child).value();
  Result<std::string> line = child_->read_line(kAnswerTimeoutMs);
  std::istringstream ss(line.ok() ? *line : "");
  std::string word;
  ss >> word;
  if (word != "READY") {
    error_ = "peer did not start: " + (line.ok() ? *line : line.status().to_string());
    return;
  }
  ss >> endpoint_ >> region_addr_ >> region_bytes_;
  ready_ = true;
}

BackendPeerProcess::~BackendPeerProcess() {
  if (child_) child_->stop(format_peer_command({PeerVerb::kQuit}), 5000);
}

std::string BackendPeerProcess::command(const std::string& line) {
  if (!child_) return "";
  if (Result<PeerCommand> c = parse_peer_command(line); c.ok() && c->verb == PeerVerb::kQuit) {
    (void)child_->write_line(line);  // no answer: the peer exits
    return "";
  }
  Result<std::string> answer = child_->ask(line, kAnswerTimeoutMs);
  return answer.ok() ? *answer : "";
}

bool BackendPeerProcess::start_command(const std::string& line) {
  return child_ && child_->write_line(line).ok();
}

bool BackendPeerProcess::hash(uint64_t* hash, bool* canaries_ok) {
  std::istringstream ss(command(format_peer_command({PeerVerb::kHash})));
  std::string word;
  int canaries = 0;
  ss >> word >> *hash >> canaries;
  *canaries_ok = canaries == 1;
  return word == "HASH";
}

void BackendPeerProcess::kill9() {
  if (!child_) return;
  child_->stop("", 0);  // SIGKILL at once, then reaped
  child_.reset();
}

}  // namespace pdkv::engine::testing
