#include "bench/engine/engine_iperf.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "engine/backends/tcp/socket_util.h"

namespace pdkv::bench {
namespace {

bool on_path(const std::string& exe) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    if (access((dirs.substr(start, end - start) + "/" + exe).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

Result<std::string> run_capture(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return unavailable("cannot run: " + command);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  int rc = pclose(pipe);
  if (rc != 0 && out.empty()) return unavailable(command + " exited with " + std::to_string(rc));
  return out;
}

}  // namespace

Result<double> iperf3_loopback_gbps(int streams, int seconds) {
  if (!on_path("iperf3")) {
    return failed_precondition("iperf3 not found on PATH (Debian package iperf3); no baseline");
  }
  uint16_t port = 0;
  {
    auto probe = engine::tcp::listen_tcp("127.0.0.1", 0, &port);
    if (!probe.ok()) return probe.status();
  }
  pid_t server = fork();
  if (server < 0) return unavailable("fork failed");
  if (server == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    const std::string p = std::to_string(port);
    execlp("iperf3", "iperf3", "-s", "-1", "-p", p.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string client = "iperf3 -c 127.0.0.1 -p " + std::to_string(port) + " -P " +
                             std::to_string(streams) + " -t " + std::to_string(seconds) +
                             " -J 2>&1";
  Result<double> result = unavailable("iperf3 client never ran");
  // The server needs a moment to bind; a refused client is retried, not a failure.
  for (int attempt = 0; attempt < 50; ++attempt) {
    Result<std::string> out = run_capture(client);
    if (!out.ok()) {
      result = out.status();
      break;
    }
    try {
      nlohmann::json j = nlohmann::json::parse(*out);
      if (j.contains("error")) {
        const std::string err = j["error"].get<std::string>();
        result = unavailable("iperf3: " + err);
        if (err.find("refused") != std::string::npos) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        break;
      }
      result = j.at("end").at("sum_received").at("bits_per_second").get<double>() / 8e9;
    } catch (const std::exception& e) {
      result = unavailable(std::string("cannot parse iperf3 JSON: ") + e.what());
    }
    break;
  }
  kill(server, SIGTERM);
  int status = 0;
  waitpid(server, &status, 0);
  return result;
}

}  // namespace pdkv::bench
