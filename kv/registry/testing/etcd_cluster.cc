#include "kv/registry/testing/etcd_cluster.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/clock.h"
#include "kv/registry/registry_settings.h"

namespace pdkv::kv::testing {
namespace {

// A port the kernel just handed out; free unless someone takes it before etcd binds it.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

std::string EtcdCluster::binary() {
  const char* env = std::getenv(std::string(kEtcdBin.name).c_str());
  std::string bin = env && *env ? env : std::string(kEtcdBin.string_default);
  return ::access(bin.c_str(), X_OK) == 0 ? bin : "";
}

Result<std::unique_ptr<EtcdCluster>> EtcdCluster::start(int members,
                                                        std::vector<std::string> extra_args) {
  if (binary().empty()) return failed_precondition("no etcd binary (/usr/bin/etcd)");
  std::unique_ptr<EtcdCluster> c(new EtcdCluster());
  c->extra_args_ = std::move(extra_args);
  char tmpl[] = "/tmp/pdkv-etcd-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return internal_error("mkdtemp failed");
  c->dir_ = tmpl;
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = fmt::format("m{}", i);
    m.client_port = free_port();
    m.peer_port = free_port();
    if (!c->initial_cluster_.empty()) c->initial_cluster_ += ',';
    c->initial_cluster_ += fmt::format("{}=http://127.0.0.1:{}", m.name, m.peer_port);
    c->members_.push_back(m);
  }
  for (int i = 0; i < members; ++i) PDKV_RETURN_IF_ERROR(c->launch(i, true));
  for (int i = 0; i < members; ++i) PDKV_RETURN_IF_ERROR(c->wait_healthy(i));
  return c;
}

Status EtcdCluster::launch(int i, bool initial) {
  Member& m = members_[i];
  const std::string bin = binary();
  const std::string client = fmt::format("http://127.0.0.1:{}", m.client_port);
  const std::string peer = fmt::format("http://127.0.0.1:{}", m.peer_port);
  const std::string data = fmt::format("{}/{}", dir_, m.name);
  const std::string log = fmt::format("{}/{}.log", dir_, m.name);
  std::vector<std::string> args = {bin,
                                   "--name",
                                   m.name,
                                   "--data-dir",
                                   data,
                                   "--listen-client-urls",
                                   client,
                                   "--advertise-client-urls",
                                   client,
                                   "--listen-peer-urls",
                                   peer,
                                   "--initial-advertise-peer-urls",
                                   peer,
                                   "--initial-cluster",
                                   initial_cluster_,
                                   "--initial-cluster-state",
                                   initial ? "new" : "existing",
                                   "--initial-cluster-token",
                                   dir_,
                                   "--heartbeat-interval",
                                   "100",
                                   "--election-timeout",
                                   "1000"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  pid_t pid = ::fork();
  if (pid < 0) return internal_error("fork failed");
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  m.pid = pid;
  return Status();
}

Status EtcdCluster::wait_healthy(int i) const {
  const TimePoint deadline = now() + std::chrono::seconds(20);
  while (now() < deadline) {
    httplib::Client cli("127.0.0.1", members_[i].client_port);
    cli.set_connection_timeout(std::chrono::milliseconds(200));
    cli.set_read_timeout(std::chrono::milliseconds(1000));
    auto r = cli.Get("/health");
    if (r && r->status == 200 && r->body.find("true") != std::string::npos) return Status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return unavailable(fmt::format("etcd member {} not healthy within 20 s (log {}/{}.log)",
                                 members_[i].name, dir_, members_[i].name));
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) kill(i);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string EtcdCluster::endpoint(int i) const {
  return fmt::format("127.0.0.1:{}", members_[i].client_port);
}

std::string EtcdCluster::endpoints() const {
  std::string out;
  for (int i = 0; i < size(); ++i) out += (i ? "," : "") + endpoint(i);
  return out;
}

void EtcdCluster::kill(int i) {
  Member& m = members_[i];
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGKILL);
  ::waitpid(m.pid, nullptr, 0);
  m.pid = -1;
}

void EtcdCluster::freeze(int i) {
  if (members_[i].pid > 0) ::kill(members_[i].pid, SIGSTOP);
}

void EtcdCluster::thaw(int i) {
  if (members_[i].pid > 0) ::kill(members_[i].pid, SIGCONT);
}

Status EtcdCluster::restart(int i) {
  kill(i);
  PDKV_RETURN_IF_ERROR(launch(i, false));
  return wait_healthy(i);
}

Result<int> EtcdCluster::leader() const {
  for (int i = 0; i < size(); ++i) {
    if (members_[i].pid <= 0) continue;
    httplib::Client cli("127.0.0.1", members_[i].client_port);
    cli.set_read_timeout(std::chrono::milliseconds(1000));
    auto r = cli.Post("/v3/maintenance/status", "{}", "application/json");
    if (!r || r->status != 200) continue;
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (!j.is_object() || !j.contains("leader") || !j.contains("header")) continue;
    const std::string leader = j["leader"].get<std::string>();
    if (leader == j["header"].value("member_id", std::string())) return i;
  }
  return unavailable("no etcd member says it leads");
}

}  // namespace pdkv::kv::testing
