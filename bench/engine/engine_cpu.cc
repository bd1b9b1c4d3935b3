#include "bench/engine/engine_cpu.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace pdkv::bench {
namespace {

// utime + stime of /proc/<who>/stat in seconds. The command name (field 2) may hold
// spaces and parentheses, so the fields are counted from its last ')'.
double process_cpu_s(const std::string& who) {
  std::ifstream f("/proc/" + who + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));  // from field 3 (state)
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int n = 3; n <= 15 && rest >> field; ++n) {
    if (n == 14) utime = std::stoull(field);
    if (n == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

SideCpu side_cpu(const std::vector<pid_t>& receivers) {
  SideCpu cpu;
  cpu.sender_s = process_cpu_s("self");
  for (pid_t pid : receivers) cpu.receiver_s += process_cpu_s(std::to_string(pid));
  return cpu;
}

}  // namespace pdkv::bench
