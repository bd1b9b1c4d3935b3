// Starts `pdkv bootstrap --port 0` as a real process, queries it, then SIGTERM: it must
// exit 0 promptly. A second process on the same port must fail, saying the port is in use.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "bootstrap/client.h"
#include "bootstrap/test_util.h"
#include "common/host_port.h"

namespace pdkv::bootstrap {
namespace {

// A `pdkv bootstrap` process: its stdout and stderr, read through pipes.
struct BootstrapProcess {
  pid_t pid = -1;
  FILE* out = nullptr;
  FILE* err = nullptr;
  ~BootstrapProcess() {
    if (pid > 0) {  // a test that stopped early: do not leave the server running
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out) fclose(out);
    if (err) fclose(err);
  }
};

std::string pdkv_binary() {
  const char* bin_dir = std::getenv("PDKV_BIN_DIR");
  return std::string(bin_dir ? bin_dir : "build/bin") + "/pdkv";
}

void spawn(BootstrapProcess* p, int port) {
  int out[2], err[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  const std::string pdkv = pdkv_binary();
  const std::string port_text = std::to_string(port);
  p->pid = fork();
  ASSERT_GE(p->pid, 0);
  if (p->pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    execl(pdkv.c_str(), "pdkv", "bootstrap", "--host", "127.0.0.1", "--port", port_text.c_str(),
          nullptr);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  p->out = fdopen(out[0], "r");
  p->err = fdopen(err[0], "r");
}

// The port from "pdkv bootstrap listening on H:P", or 0.
int listening_port(BootstrapProcess& p) {
  char line[256] = {};
  if (fgets(line, sizeof(line), p.out) == nullptr) return 0;
  const std::string text(line);
  constexpr std::string_view kPrefix = "listening on ";
  const size_t at = text.find(kPrefix);
  if (at == std::string::npos) return 0;
  std::string address = text.substr(at + kPrefix.size());
  address = address.substr(0, address.find_first_of(" \n"));
  Result<HostPort> hp = parse_host_port(address);
  return hp.ok() ? hp->port : 0;
}

// Waits at most `ms` for the process to exit; kills it past that. Returns its wait status,
// or -1 if it had to be killed.
int wait_exit(BootstrapProcess& p, int64_t ms) {
  const pid_t pid = p.pid;
  p.pid = -1;  // reaped below either way
  auto start = now();
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && elapsed_ms(start) < ms) {
    usleep(10 * 1000);
  }
  if (done != 0) return status;
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

TEST(BootstrapCliTest, ServesThenExitsCleanlyOnSigterm) {
  if (access(pdkv_binary().c_str(), X_OK) != 0) GTEST_SKIP() << pdkv_binary() << " not built";
  BootstrapProcess p;
  spawn(&p, 0);
  int port = listening_port(p);
  ASSERT_GT(port, 0) << "pdkv bootstrap printed no port";

  BootstrapClient c("127.0.0.1", port);
  EXPECT_TRUE(c.health(std::chrono::milliseconds(2000)).ok());
  auto deadline = now() + std::chrono::seconds(10);
  ASSERT_TRUE(c.register_rank(testing::sample_registration(0), deadline).ok());
  auto ep = c.rank(0, 0, deadline);
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  EXPECT_EQ(ep->rank_port, 30000);

  auto start = now();
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  int status = wait_exit(p, 10000);
  ASSERT_NE(status, -1) << "pdkv bootstrap did not exit within 10 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_LT(elapsed_ms(start), 3000);
}

// Without SO_REUSEPORT the second process cannot bind: it must not silently share the
// port (and half the registrations) with the first.
TEST(BootstrapCliTest, ASecondProcessOnTheSamePortFailsSayingItIsInUse) {
  if (access(pdkv_binary().c_str(), X_OK) != 0) GTEST_SKIP() << pdkv_binary() << " not built";
  BootstrapProcess first;
  spawn(&first, 0);
  int port = listening_port(first);
  ASSERT_GT(port, 0);
  BootstrapProcess second;
  spawn(&second, port);
  int status = wait_exit(second, 10000);
  std::string err;
  for (char line[512]; fgets(line, sizeof(line), second.err) != nullptr;) err += line;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_NE(err.find("Unavailable"), std::string::npos) << err;
  EXPECT_NE(err.find("in use"), std::string::npos) << err;
  EXPECT_TRUE(BootstrapClient("127.0.0.1", port).health(std::chrono::milliseconds(2000)).ok());
  kill(first.pid, SIGTERM);
  EXPECT_NE(wait_exit(first, 10000), -1);
}

}  // namespace
}  // namespace pdkv::bootstrap
