#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/engine/engine_baselines.h"

extern char** environ;

namespace pdkv::bench {
namespace {

// Environment of the current process with UCX_TLS replaced.
std::vector<std::string> env_with_tls(const std::string& tls) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("UCX_TLS=", 0) != 0) env.emplace_back(*e);
  }
  env.push_back("UCX_TLS=" + tls);
  return env;
}

std::vector<char*> cstrs(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

Result<double> ucx_perftest_put_bw_gbps(const std::string& tls, uint64_t message_bytes,
                                        uint64_t iterations, int port) {
  auto env = env_with_tls(tls);
  auto envp = cstrs(env);
  std::vector<std::string> sargs{"ucx_perftest", "-p", std::to_string(port)};
  auto sargv = cstrs(sargs);
  pid_t server = -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  int rc = posix_spawnp(&server, "ucx_perftest", &fa, nullptr, sargv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return unavailable("cannot run ucx_perftest (Debian package ucx-utils)");
  std::string cmd;
  cmd += "UCX_TLS=" + tls + " ";
  cmd += "ucx_perftest 127.0.0.1 -p " + std::to_string(port) + " -t ucp_put_bw -s " +
         std::to_string(message_bytes) + " -n " + std::to_string(iterations) + " 2>&1";
  std::string out;
  // The server needs a moment to listen; retry the client a few times.
  for (int attempt = 0; attempt < 20 && out.find("Final:") == std::string::npos; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    out.clear();
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) break;
    char buf[512];
    while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
    pclose(p);
  }
  int status = 0;
  if (waitpid(server, &status, WNOHANG) == 0) {
    kill(server, SIGTERM);
    waitpid(server, &status, 0);
  }
  auto pos = out.find("Final:");
  if (pos == std::string::npos) {
    return unavailable("ucx_perftest (" + cmd +
                       ") gave no result: " + out.substr(out.size() > 300 ? out.size() - 300 : 0));
  }
  // "Final: iters lat50 lat_avg lat_overall bw_avg bw_overall msgrate_avg msgrate_overall",
  // bandwidth in MB/s with MB = 2^20 bytes.
  std::istringstream in(out.substr(pos + 6));
  double v[6] = {};
  for (double& x : v) in >> x;
  if (!in || v[5] <= 0) return unavailable("cannot parse ucx_perftest output: " + out.substr(pos));
  return v[5] * 1048576.0 / 1e9;
}

}  // namespace pdkv::bench
