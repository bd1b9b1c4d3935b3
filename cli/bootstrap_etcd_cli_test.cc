// `pdkv bootstrap --registry etcd --authenticate-reads` as a real process over a real etcd
// member: a prefill rank (this process, with the cluster secret) publishes its sealed
// entry, and the server must answer what the HTTP bootstrap server answers under the same
// read authentication: unsigned lookups (GET /route, GET /instances, POST
// /query_dp_ranks) and unsigned DP-rank registrations get 401 naming the server's id,
// signed ones are served, the DP-rank routes included.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/client.h"
#include "bootstrap/request_auth.h"
#include "kv/registry/testing/etcd_registry_fixture.h"

namespace pdkv::kv::testing {
namespace {

using namespace std::chrono_literals;

std::string pdkv_binary() {
  const char* bin_dir = std::getenv("PDKV_BIN_DIR");
  return std::string(bin_dir ? bin_dir : "build/bin") + "/pdkv";
}

// The secret test_secret(7) is made of, in a file of mode 600.
std::string write_secret_file() {
  char path[] = "/tmp/pdkv-etcd-cli-secret-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  const std::vector<uint8_t> secret(32, 7);
  EXPECT_EQ(write(fd, secret.data(), secret.size()), 32);
  fchmod(fd, 0600);
  close(fd);
  return path;
}

// `pdkv bootstrap --registry etcd ...`; its port from "listening on H:P", or 0.
struct ServerProcess {
  pid_t pid = -1;
  int port = 0;
  ServerProcess(const std::string& endpoints, const std::string& secret_file) {
    int out[2];
    if (pipe(out) != 0) return;
    const std::string bin = pdkv_binary();
    pid = fork();
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      setenv("PDKV_ETCD_ENDPOINTS", endpoints.c_str(), 1);
      setenv("PDKV_ETCD_PREFIX", "/cli", 1);
      execl(bin.c_str(), "pdkv", "bootstrap", "--registry", "etcd", "--instance", "p:1", "--host",
            "127.0.0.1", "--port", "0", "--authenticate-reads", "--secret-file",
            secret_file.c_str(), nullptr);
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char line[512] = {};
    if (f != nullptr && fgets(line, sizeof line, f) != nullptr) {
      const std::string text(line);
      const size_t at = text.find("127.0.0.1:");
      if (at != std::string::npos) port = std::atoi(text.c_str() + at + 10);
    }
    if (f != nullptr) fclose(f);
  }
  ~ServerProcess() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  }
};

TEST_F(EtcdRegistryTest, EtcdViewAuthenticatesReadsAndServesTheDpRankRoutes) {
  if (access(pdkv_binary().c_str(), X_OK) != 0) GTEST_SKIP() << pdkv_binary() << " not built";
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  const auto key = test_secret(7);
  auto prefill = directory(etcd_options(*cluster, "/cli"), key);
  ASSERT_TRUE(prefill->register_prefill_rank("p:1", rank_info(0, 1, 5000), now() + 5s).ok());
  const std::string secret_file = write_secret_file();
  ServerProcess server(cluster->endpoints(), secret_file);
  ASSERT_GT(server.port, 0) << "pdkv bootstrap --registry etcd printed no port";

  httplib::Client http("127.0.0.1", server.port);
  // /health answers 200 once the server's mirror is in sync with etcd.
  bool synced = false;
  std::string id_header;
  for (TimePoint until = now() + 5s; !synced && now() < until; std::this_thread::sleep_for(20ms)) {
    auto health = http.Get("/health");
    synced = health && health->status == 200;
    if (synced) id_header = health->get_header_value(bootstrap::kServerIdHeader);
  }
  ASSERT_TRUE(synced) << "/health never answered 200";
  const auto named = bootstrap::parse_server_id(id_header);
  EXPECT_TRUE(named.has_value()) << "no server id on /health";
  const bootstrap::ServerId id = named.value_or(bootstrap::ServerId{});
  auto signed_headers = [&](const char* method, const std::string& target,
                            const std::string& body) {
    return httplib::Headers{
        {bootstrap::kAuthHeader,
         bootstrap::sign_request(*key, id, method, target, body, bootstrap::unix_now_ms())}};
  };
  // Unsigned: refused, saying nothing of the routes, naming the server's id.
  for (const char* path : {"/route?engine_rank=0&target_dp_group=0",
                           "/route?engine_rank=-1&target_dp_group=-1", "/instances"}) {
    auto got = http.Get(path);
    ASSERT_TRUE(got) << path;
    EXPECT_EQ(got->status, 401) << path << ": " << got->body;
    EXPECT_EQ(got->body.find("5000"), std::string::npos) << path << ": " << got->body;
    EXPECT_EQ(got->get_header_value(bootstrap::kServerIdHeader), bootstrap::server_id_text(id));
  }
  const std::string query = R"({"bootstrap_rooms": [77, 78]})";
  auto unsigned_query = http.Post("/query_dp_ranks", query, "application/json");
  ASSERT_TRUE(unsigned_query);
  EXPECT_EQ(unsigned_query->status, 401) << unsigned_query->body;
  const std::string placement = R"({"bootstrap_room": 78, "dp_rank": 0})";
  auto unsigned_put = http.Post("/register_dp_rank", placement, "application/json");
  ASSERT_TRUE(unsigned_put);
  EXPECT_EQ(unsigned_put->status, 401) << unsigned_put->body;

  // Signed requests, as a member makes them: served (once the watch has the rank).
  bootstrap::ClientOptions signed_options;
  signed_options.cluster_key = key;
  bootstrap::BootstrapClient member("127.0.0.1", server.port, signed_options);
  auto rank = member.rank(0, 0, now() + 5s);
  ASSERT_TRUE(rank.ok()) << rank.status().to_string();
  EXPECT_EQ(rank->rank_port, 5000);
  ASSERT_TRUE(member.register_room_dp_rank(77, 0, now() + 5s).ok());

  auto answered = http.Post("/query_dp_ranks", signed_headers("POST", "/query_dp_ranks", query),
                            query, "application/json");
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->status, 200) << answered->body;
  EXPECT_EQ(nlohmann::json::parse(answered->body, nullptr, false), nlohmann::json({{"77", 0}}))
      << answered->body;
  auto listed = http.Get("/instances", signed_headers("GET", "/instances", ""));
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->status, 200) << listed->body;

  // A signed request replayed: refused (the bootstrap server's nonce check).
  const httplib::Headers once = signed_headers("GET", "/instances", "");
  auto first = http.Get("/instances", once);
  auto replayed = http.Get("/instances", once);
  ASSERT_TRUE(first && replayed);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(replayed->status, 401);
  // Metrics, open as the bootstrap server's: the instance's rank and the refusals.
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("pdkv_bootstrap_registered_ranks 1\n"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("pdkv_bootstrap_errors_total{kind=\"unauthorized\"} 6\n"),
            std::string::npos)
      << metrics->body;
  unlink(secret_file.c_str());
}

// Reads authenticated without a secret cannot serve anyone: a usage error, as with the
// HTTP server.
TEST_F(EtcdRegistryTest, EtcdViewRefusesAuthenticatedReadsWithoutASecret) {
  if (access(pdkv_binary().c_str(), X_OK) != 0) GTEST_SKIP() << pdkv_binary() << " not built";
  const std::string cmd = "timeout 20 env -u PDKV_SECRET_FILE " + pdkv_binary() +
                          " bootstrap --registry etcd --instance p:1 --port 0 "
                          "--authenticate-reads >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

}  // namespace
}  // namespace pdkv::kv::testing
