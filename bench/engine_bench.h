// `pdkv bench engine`: one sender process (this one) and one receiver process
// (pdkv_engine_peer, fork/exec'd) over loopback, the workload of engine_workload.h,
// against a baseline measured in the same run (TARGETS.md "How the figures are
// reported"): iperf3 with the same stream count for the TCP backend (P1 page 16, P1s
// page 1). Every destination byte is verified after the timed rounds.
//
// Thread safety: run one benchmark at a time (it loads the machine).
#pragma once

#include <string>

#include "common/status.h"

namespace pdkv::bench {

struct EngineBenchArgs {
  std::string backend = "tcp";
  std::string ucx_tls;  // --backend ucx: UCX transports (PDKV_UCX_TLS for both processes)
  std::string model = "llama3-8b";
  uint64_t tokens = 4096;
  uint64_t page = 16;
  int streams = 0;  // 0 = the engine default (PDKV_TCP_STREAMS or EngineOptions)
  int rounds = 5;
  int iperf_seconds = 3;
  std::string json_path;  // empty = no JSON file
  uint64_t seed = 1;
};

// Prints the table to stdout, writes the JSON if asked. Returns OK only if the run
// completed and every byte verified (a missed target is reported, not an error).
Status run_engine_bench(const EngineBenchArgs& args);

}  // namespace pdkv::bench
