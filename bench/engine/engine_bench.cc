#include "bench/engine/engine_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench/engine/engine_baselines.h"
#include "bench/engine/engine_bench_util.h"
#include "bench/engine/engine_cpu.h"
#include "bench/engine/engine_iperf.h"
#include "bench/engine/engine_workload.h"
#include "common/clock.h"

namespace pdkv::bench {
namespace {

std::string target_id(const EngineBenchArgs& a) {
  if (a.backend == "shm") return "P2";
  if (a.backend == "ucx") return "P3_" + tls_key(effective_ucx_tls(a.ucx_tls));
  if (a.head_split > 1 || a.decode_tp > 1 || a.pairs > 1) {
    return fmt::format("engine_page{}_dtp{}_split{}", a.page, a.decode_tp, a.head_split) +
           (a.pairs > 1 ? fmt::format("_pairs{}", a.pairs) : "");
  }
  if (a.page == 16) return "P1";
  if (a.page == 1) return "P1s";
  return "engine_page" + std::to_string(a.page);
}

double target_ratio(const EngineBenchArgs& a) {
  if (a.backend == "shm") return 0.80;
  return a.page == 1 && a.backend == "tcp" ? 0.60 : 0.90;
}

// One round on every link at once (a thread each beyond the first); the first error.
Status round_together(const std::vector<std::unique_ptr<BenchLink>>& links,
                      const std::string& what) {
  std::vector<Status> results(links.size());
  std::vector<std::thread> others;
  for (size_t i = 1; i < links.size(); ++i) {
    others.emplace_back([&, i] { results[i] = links[i]->round(what); });
  }
  results[0] = links[0]->round(what);
  for (std::thread& t : others) t.join();
  for (Status& st : results) PDKV_RETURN_IF_ERROR(st);
  return Status();
}

}  // namespace

Status run_engine_bench(const EngineBenchArgs& args) {
  // Both processes (the peer inherits the environment) use the same UCX transports.
  if (!args.ucx_tls.empty()) setenv("PDKV_UCX_TLS", args.ucx_tls.c_str(), 1);
  PDKV_ASSIGN_OR_RETURN(Workload w, bench_workload(args));
  PDKV_ASSIGN_OR_RETURN(engine::EngineOptions options, engine::EngineOptions::from_env());
  options.backend = args.backend;
  if (args.streams > 0) options.tcp.streams = args.streams;
  const int streams = options.tcp.streams;

  SourceMemory src(w.layout_bytes);
  if (src.data == nullptr) return internal_error("cannot map the source layout");
  engine::testing::fill_pattern(src.data, src.size, args.seed);
  std::vector<std::unique_ptr<BenchLink>> links;
  for (int p = 0; p < args.pairs; ++p) {
    PDKV_ASSIGN_OR_RETURN(std::unique_ptr<BenchLink> link,
                          start_link(w, src, options, {"PDKV_ENGINE_BACKEND=" + args.backend}));
    links.push_back(std::move(link));
  }
  const std::vector<engine::WriteBlock>& blocks = links.front()->blocks;
  const uint64_t bytes_per_round = w.payload_bytes * links.size();

  std::printf(
      "pdkv bench engine: backend %s, model %s, %lu tokens, page %lu (%lu B items), "
      "%zu buffers, %zu blocks, %.1f MiB per round, %d streams, %d pair(s)\n",
      args.backend.c_str(), args.model.c_str(), static_cast<unsigned long>(w.tokens),
      static_cast<unsigned long>(w.page_tokens), static_cast<unsigned long>(w.item_bytes),
      w.buffer_offsets.size(), blocks.size(), bytes_per_round / 1048576.0, streams, args.pairs);
  std::fflush(stdout);

  // Baseline with the same stream count, once before and once after the engine rounds
  // (the mean is used): the machine is shared, and load that changes during the run then
  // weighs on both sides of the ratio alike.
  Result<double> iperf_before =
      measure_backend_baseline(args.backend, args.ucx_tls, w.blocks.front().length, w.payload_bytes,
                               streams, args.iperf_seconds)
          .gbps;
  if (!iperf_before.ok()) {
    std::printf("baseline: %s\n", iperf_before.status().to_string().c_str());
  }

  // One untimed round faults in the destination pages in the receivers.
  PDKV_RETURN_IF_ERROR(round_together(links, "warm-up round"));
  std::vector<double> gbps;
  std::printf("%6s %10s %8s\n", "round", "seconds", "GB/s");
  std::vector<pid_t> receivers;
  for (const auto& link : links) receivers.push_back(link->peer->pid());
  const SideCpu cpu_before = side_cpu(receivers);
  for (int r = 0; r < args.rounds; ++r) {
    const TimePoint start = now();
    PDKV_RETURN_IF_ERROR(round_together(links, "timed round"));
    const double s = elapsed_s(start);
    gbps.push_back(bytes_per_round / s / kGiga);
    std::printf("%6d %10.4f %8.3f\n", r, s, gbps.back());
  }
  const SideCpu cpu_after = side_cpu(receivers);
  const double rounds_run = std::max(1, args.rounds);
  size_t bad_block = w.blocks.size();
  for (auto& link : links) {
    PDKV_ASSIGN_OR_RETURN(bad_block, link->verification_round(w, src, "verification round"));
    if (bad_block != w.blocks.size()) break;
  }
  const bool verified = bad_block == w.blocks.size();

  Result<double> iperf_after =
      iperf_before.ok()
          ? measure_backend_baseline(args.backend, args.ucx_tls, w.blocks.front().length,
                                     w.payload_bytes, streams, args.iperf_seconds)
                .gbps
          : iperf_before.status();
  Result<double> iperf = iperf_after;
  if (iperf_before.ok() && iperf_after.ok()) iperf = (*iperf_before + *iperf_after) / 2;
  if (iperf_before.ok() && iperf_after.ok()) {
    std::printf("iperf3 -P %d: %.3f GB/s before, %.3f GB/s after the engine rounds\n", streams,
                *iperf_before, *iperf_after);
  }
  const double value = median(gbps);
  const double best = *std::max_element(gbps.begin(), gbps.end());
  const std::string id = target_id(args);
  const double baseline = iperf.ok() ? *iperf : 0.0;
  const double ratio = baseline > 0 ? value / baseline : 0.0;
  std::printf(
      "\n| id | pdkv GB/s (median of %d, best %.3f) | baseline GB/s (tcp: iperf3 -P %d) | ratio | "
      "target | "
      "verified |\n|---|---|---|---|---|---|\n",
      args.rounds, best, streams);
  std::printf("| %s | %.3f | %s | %s | >= %.2f | %s |\n", id.c_str(), value,
              iperf.ok() ? fmt::format("{:.3f}", baseline).c_str() : "n/a",
              iperf.ok() ? fmt::format("{:.3f}", ratio).c_str() : "n/a", target_ratio(args),
              verified ? "yes" : "NO");
  if (!verified) {
    std::printf("verification failed at block %zu\n", bad_block);
  }

  if (!args.json_path.empty()) {
    nlohmann::json j;
    const Figure figure{
        value,
        baseline,
        ratio,
        target_ratio(args),
        verified,
        args.backend == "tcp"
            ? std::string("iperf3 loopback, same stream count, mean of before and after")
            : backend_baseline_kind(args.backend, args.ucx_tls, w.blocks.front().length)};
    j[id] = figure_json(figure, {{"baseline_ok", iperf.ok()},
                                 {"baseline_before", iperf_before.ok() ? *iperf_before : 0.0},
                                 {"baseline_after", iperf_after.ok() ? *iperf_after : 0.0},
                                 {"best", best},
                                 {"rounds", gbps},
                                 {"backend", args.backend},
                                 {"model", args.model},
                                 {"tokens", args.tokens},
                                 {"page", args.page},
                                 {"decode_tp", args.decode_tp},
                                 {"head_split", args.head_split},
                                 {"streams", streams},
                                 {"blocks", blocks.size()},
                                 {"pairs", args.pairs},
                                 {"bytes_per_round", bytes_per_round}});
    // Per timed round, each side's processes (engine_cpu.h): what the e2e scale case
    // subtracts from its managers' CPU (P13).
    j[id]["cpu_s_per_round"] = {
        {"sender", (cpu_after.sender_s - cpu_before.sender_s) / rounds_run},
        {"receiver", (cpu_after.receiver_s - cpu_before.receiver_s) / rounds_run}};
    if (args.backend == "ucx") j["P3"] = j[id];  // the target's key; per-transport key beside it
    PDKV_RETURN_IF_ERROR(write_json_file(args.json_path, j));
  }
  if (!verified) return data_loss("destination bytes do not match the source");
  return Status();
}

}  // namespace pdkv::bench
