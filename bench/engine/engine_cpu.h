// CPU time (user + system) of the engine benchmark's two sides over its timed rounds: the
// sending side is this process (every sender engine lives here), the receiving side the
// receiver processes (pdkv_engine_peer). `pdkv bench e2e --case scale` subtracts these
// from what its managers' processes spend moving the same round (P13: the CPU a room costs
// above the bytes it carries).
//
// Thread safety: pure functions of /proc; call from any thread.
#pragma once

#include <sys/types.h>

#include <vector>

namespace pdkv::bench {

struct SideCpu {
  double sender_s = 0;
  double receiver_s = 0;
};

// Read from /proc/self/stat and /proc/<pid>/stat (utime + stime, clock ticks); a process
// that cannot be read counts 0, so the figure is low rather than absent.
SideCpu side_cpu(const std::vector<pid_t>& receivers);

}  // namespace pdkv::bench
