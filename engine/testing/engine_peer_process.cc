#include "engine/testing/engine_peer_process.h"

#include <sstream>

#include "engine/testing/peer_commands.h"

namespace pdkv::engine::testing {

Result<std::unique_ptr<EnginePeerProcess>> EnginePeerProcess::start(
    const GuardedBuffer& buffer, const std::vector<PeerRegion>& regions,
    const std::vector<std::string>& env, int ready_timeout_ms) {
  const std::string binary = helper_binary_path("pdkv_engine_peer");
  std::vector<std::string> argv = {binary, "--fd", std::to_string(buffer.fd()), "--size",
                                   std::to_string(buffer.size())};
  for (const PeerRegion& r : regions) {
    argv.push_back("--region");
    argv.push_back(std::to_string(r.offset) + ":" + std::to_string(r.length));
  }
  PDKV_ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> child,
                        ChildProcess::spawn(argv, child_environment(env), buffer.fd()));
  std::unique_ptr<EnginePeerProcess> p(new EnginePeerProcess(std::move(child)));
  Result<std::string> line = p->child_->read_line(ready_timeout_ms);
  if (!line.ok()) return line.status().with_context("peer " + binary + " did not get ready");
  std::istringstream words(*line);
  std::string word;
  words >> word >> p->endpoint_ >> std::hex >> p->remote_base_;
  if (word != "READY" || p->endpoint_.empty()) {
    return internal_error("peer said '" + *line + "' instead of READY");
  }
  return p;
}

EnginePeerProcess::~EnginePeerProcess() {
  child_->stop(format_peer_command({PeerVerb::kQuit}), 5000);
}

Status EnginePeerProcess::ping(int timeout_ms) {
  PDKV_ASSIGN_OR_RETURN(std::string line,
                        child_->ask(format_peer_command({PeerVerb::kPing}), timeout_ms));
  if (line != "PONG") return internal_error("peer answered '" + line + "'");
  return Status();
}

Status EnginePeerProcess::command(const std::string& line, int timeout_ms) {
  PDKV_ASSIGN_OR_RETURN(std::string answer, child_->ask(line, timeout_ms));
  if (answer != "OK") return internal_error("peer answered '" + answer + "' to '" + line + "'");
  return Status();
}

Status EnginePeerProcess::device_upload(int timeout_ms) {
  return command(format_peer_command(PeerCommand{PeerVerb::kUpload}), timeout_ms);
}

Status EnginePeerProcess::device_download(int timeout_ms) {
  return command(format_peer_command(PeerCommand{PeerVerb::kDownload}), timeout_ms);
}

Status EnginePeerProcess::grant(uint64_t id, uint64_t offset, uint64_t length, int timeout_ms) {
  return command(format_peer_command(grant_command(id, offset, length)), timeout_ms);
}

Status EnginePeerProcess::revoke_grant(uint64_t id, int timeout_ms) {
  return command(format_peer_command(revoke_command(id)), timeout_ms);
}

}  // namespace pdkv::engine::testing
