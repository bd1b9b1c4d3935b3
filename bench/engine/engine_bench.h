// `pdkv bench engine`: one sender process (this one) and one receiver process
// (pdkv_engine_peer, fork/exec'd) over loopback (or --pairs of them, moving at once), the workload
// of engine_workload.h, against a baseline measured in the same run (BENCHMARKS.md says how the
// figures are reported): iperf3 with the same stream count for the TCP backend (P1 page 16, P1s
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
  // The destination rank holds 1/decode_tp of the model's heads (bytes per token divided).
  uint64_t decode_tp = 1;
  // > 1: heterogeneous-TP block pattern (engine_workload.h). P6's geometry (llama3-8b,
  // prefill TP 4 -> decode TP 2) is --decode-tp 2 --head-split 2: 512 B blocks.
  uint64_t head_split = 1;
  // > 1: that many sender/receiver pairs (each its own engine and receiver process) move
  // their rounds at the same time and the aggregate is reported: P6's data movement (4
  // prefill ranks at once) without the managers, on the same cores, so P6's ratio to it
  // shows what the managers cost.
  int pairs = 1;
  // Instead of the baseline comparison: authentication on vs off, interleaved
  // (bench/engine/engine_auth_ab.h).
  bool auth_ab = false;
  bool auth_ab_on_first = false;  // --auth-ab-first on: the authenticated arm starts first
  // Device memory (bench/engine/engine_device_bench.h): where the sender's source and the
  // receiver's destination live ("host" or "device"), and which driver ("cuda": the GPU's
  // libcuda.so.1; "fake": the fake driver built beside pdkv, for the record only).
  std::string src_memory = "host";
  std::string dst_memory = "host";
  std::string device_driver = "cuda";
  // "cuda_ipc": device memory moves over the same-host device path (engine_ipc_bench.h);
  // empty: over --backend.
  std::string path;
  int peer_device = 0;  // with --path cuda_ipc: the receiver's device
};

// Prints the table to stdout, writes the JSON if asked. Returns OK only if the run
// completed and every byte verified (a missed target is reported, not an error).
Status run_engine_bench(const EngineBenchArgs& args);

}  // namespace pdkv::bench
