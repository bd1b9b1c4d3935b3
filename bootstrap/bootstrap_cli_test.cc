// Starts `pdkv bootstrap --port 0` as a real process, queries it, then SIGTERM: it must
// exit 0 promptly.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "bootstrap/client.h"
#include "bootstrap/test_util.h"

namespace pdkv::bootstrap {
namespace {

TEST(BootstrapCliTest, ServesThenExitsCleanlyOnSigterm) {
  const char* bin_dir = std::getenv("PDKV_BIN_DIR");
  std::string pdkv = std::string(bin_dir ? bin_dir : "build/bin") + "/pdkv";
  if (access(pdkv.c_str(), X_OK) != 0) GTEST_SKIP() << pdkv << " not built";
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    execl(pdkv.c_str(), "pdkv", "bootstrap", "--host", "127.0.0.1", "--port", "0", nullptr);
    _exit(127);
  }
  close(out[1]);
  FILE* f = fdopen(out[0], "r");
  char line[256] = {};
  ASSERT_NE(fgets(line, sizeof(line), f), nullptr) << "pdkv bootstrap printed nothing";
  std::string text(line);
  size_t colon = text.rfind(':');
  ASSERT_NE(colon, std::string::npos) << text;
  int port = std::stoi(text.substr(colon + 1));

  BootstrapClient c("127.0.0.1", port);
  EXPECT_TRUE(c.health(std::chrono::milliseconds(2000)).ok());
  auto deadline = now() + std::chrono::seconds(10);
  ASSERT_TRUE(c.register_rank(testing::sample_registration(0), deadline).ok());
  auto ep = c.rank(0, 0, deadline);
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  EXPECT_EQ(ep->rank_port, 30000);

  auto start = now();
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  // Bounded wait: poll waitpid for at most 10 s.
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && elapsed_ms(start) < 10000) {
    usleep(10 * 1000);
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "pdkv bootstrap did not exit within 10 s of SIGTERM";
  }
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_LT(elapsed_ms(start), 3000);
  fclose(f);
}

}  // namespace
}  // namespace pdkv::bootstrap
