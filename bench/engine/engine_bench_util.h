// Pieces both engine benchmarks use (engine_bench.cc, engine_auth_ab.cc): the sender's
// source memory, a sender connected to a receiver process, a median, and the byte check of
// a workload's destination.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/engine/engine_bench.h"
#include "bench/engine/engine_workload.h"
#include "common/status.h"
#include "engine/engine_options.h"
#include "engine/testing/engine_peer_process.h"
#include "engine/testing/guarded_buffer.h"
#include "engine/transfer_engine.h"

namespace pdkv::bench {

inline constexpr double kGiga = 1e9;

// Anonymous source memory, pre-faulted by the pattern fill so the timed rounds measure
// transfer, not page faults.
class SourceMemory {
 public:
  explicit SourceMemory(size_t bytes);
  ~SourceMemory();
  SourceMemory(const SourceMemory&) = delete;
  SourceMemory& operator=(const SourceMemory&) = delete;
  uint8_t* data = nullptr;  // null if the mapping failed
  size_t size = 0;
};

// The workload of --model, --tokens, --page, --seed, --decode-tp and --head-split.
Result<Workload> bench_workload(const EngineBenchArgs& args);

// The receiver's registered regions: every KV buffer (and state slot) of the layout.
std::vector<engine::testing::PeerRegion> peer_regions(const Workload& w);

// The workload's blocks with the source and destination layouts at these addresses.
std::vector<engine::WriteBlock> absolute_blocks(const Workload& w, uint64_t src_base,
                                                uint64_t dst_base);

double median(std::vector<double> v);  // v must not be empty

// The fields every figure's JSON record starts with (BENCHMARKS.md): the measured value
// against its baseline measured in the same run, both in GB/s, their ratio and its target,
// whether every destination byte verified, and what the baseline was.
struct Figure {
  double value = 0;
  double baseline = 0;
  double ratio = 0;
  double target_ratio = 0;
  bool verified = false;
  std::string baseline_kind;
};
// `figure`'s fields with `extra` (the benchmark's own: its rounds, its workload) merged in.
nlohmann::json figure_json(const Figure& figure, const nlohmann::json& extra);

// Writes `j` (indented) to `path`; Internal if the file cannot be written.
Status write_json_file(const std::string& path, const nlohmann::json& j);

// Index of the first block whose destination bytes differ from its source, or
// w.blocks.size() when every byte matches.
size_t first_bad_block(const Workload& w, const uint8_t* src, const uint8_t* dst);

// A sender engine with `src` registered and a session to a receiver process that holds
// its own destination layout: the workload's blocks move from one to the other.
struct BenchLink {
  std::unique_ptr<engine::testing::GuardedBuffer> dst;
  std::unique_ptr<engine::testing::EnginePeerProcess> peer;
  std::unique_ptr<engine::TransferEngine> sender;
  engine::SessionId session{};
  std::vector<engine::WriteBlock> blocks;

  // One round of every block; `what` names it in an error.
  Status round(const std::string& what) {
    return sender->transfer(session, blocks).with_context(what);
  }
  // Poisons the destination, moves one more round and checks every byte of it (a stale
  // image from an earlier round cannot pass): first_bad_block() of that round.
  Result<size_t> verification_round(const Workload& w, const SourceMemory& src,
                                    const std::string& what);
};

// Starts the receiver process (`peer_env` entries override its inherited environment),
// creates the sender from `options` and opens the session. `src_base` (0: src's own
// address) is where the source layout lives: another copy of it, in device memory.
Result<std::unique_ptr<BenchLink>> start_link(const Workload& w, const SourceMemory& src,
                                              const engine::EngineOptions& options,
                                              const std::vector<std::string>& peer_env,
                                              uint64_t src_base = 0);

}  // namespace pdkv::bench
