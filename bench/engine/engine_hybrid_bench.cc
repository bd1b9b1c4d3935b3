#include "bench/engine/engine_hybrid_bench.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/engine/engine_bench_util.h"
#include "bench/engine/engine_hybrid_workload.h"
#include "common/clock.h"

namespace pdkv::bench {
namespace {

constexpr double kTarget = 0.90;

// One side of the comparison: its workload, source, receiver process and sender engine.
struct Arm {
  const char* name = "";
  Workload w;
  std::unique_ptr<SourceMemory> src;
  std::unique_ptr<BenchLink> link;
  std::vector<double> gbps;
  size_t bad_block = 0;  // w.blocks.size() once verified
};

Status start_arm(Arm& arm, const engine::EngineOptions& options, uint64_t seed) {
  arm.src = std::make_unique<SourceMemory>(arm.w.layout_bytes);
  if (arm.src->data == nullptr) return internal_error("cannot map the source layout");
  engine::testing::fill_pattern(arm.src->data, arm.src->size, seed);
  PDKV_ASSIGN_OR_RETURN(
      arm.link, start_link(arm.w, *arm.src, options, {"PDKV_ENGINE_BACKEND=" + options.backend}));
  // One untimed round faults the destination pages in.
  return arm.link->round(std::string(arm.name) + " warm-up round");
}

Status timed_round(Arm& arm) {
  const TimePoint start = now();
  PDKV_RETURN_IF_ERROR(arm.link->round(std::string(arm.name) + " round"));
  arm.gbps.push_back(static_cast<double>(arm.w.payload_bytes) / elapsed_s(start) / kGiga);
  return Status();
}

Status verify_arm(Arm& arm) {
  PDKV_ASSIGN_OR_RETURN(
      arm.bad_block,
      arm.link->verification_round(arm.w, *arm.src, std::string(arm.name) + " verification round"));
  return Status();
}

// The group a hybrid block belongs to.
std::string group_of(const HybridWorkload& hw, size_t block) {
  std::string name;
  for (size_t g = 0; g < hw.groups.size(); ++g) {
    if (block >= hw.group_first_block[g]) name = hw.groups[g].name;
  }
  return name;
}

nlohmann::json groups_json(const HybridWorkload& hw) {
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupSummary& g : hw.groups) {
    groups.push_back({{"name", g.name},
                      {"blocks", g.blocks},
                      {"bytes", g.bytes},
                      {"block_bytes", g.block_bytes}});
  }
  return groups;
}

}  // namespace

Status run_engine_hybrid_bench(const EngineBenchArgs& args) {
  if (args.decode_tp != 1 || args.head_split != 1 || args.pairs != 1) {
    return invalid_argument(
        "the hybrid presets (P12) take no --decode-tp, --head-split or --pairs");
  }
  if (!args.ucx_tls.empty()) setenv("PDKV_UCX_TLS", args.ucx_tls.c_str(), 1);
  PDKV_ASSIGN_OR_RETURN(const HybridPreset preset, find_hybrid_preset(args.model));
  PDKV_ASSIGN_OR_RETURN(HybridWorkload hw,
                        make_hybrid_workload(preset, args.tokens, args.page, args.seed));
  Arm hybrid;
  hybrid.name = "hybrid";
  hybrid.w = hw.workload;
  Arm plain;
  plain.name = "plain";
  PDKV_ASSIGN_OR_RETURN(plain.w, make_plain_workload(hybrid.w.payload_bytes, args.page,
                                                     hybrid.w.pages, args.seed + 1));
  PDKV_ASSIGN_OR_RETURN(engine::EngineOptions options, engine::EngineOptions::from_env());
  options.backend = args.backend;
  if (args.streams > 0) options.tcp.streams = args.streams;
  PDKV_RETURN_IF_ERROR(start_arm(hybrid, options, args.seed));
  PDKV_RETURN_IF_ERROR(start_arm(plain, options, args.seed + 1));

  std::printf(
      "pdkv bench engine (P12): backend %s, model %s, %lu tokens, page %lu, %.1f MiB per "
      "round, %d streams, %d rounds per arm, ABBA order\n",
      args.backend.c_str(), args.model.c_str(), static_cast<unsigned long>(args.tokens),
      static_cast<unsigned long>(args.page), hybrid.w.payload_bytes / 1048576.0,
      options.tcp.streams, args.rounds);
  for (const GroupSummary& g : hw.groups) {
    std::printf("  group %-9s %8lu blocks of %8lu B, %8.1f MiB\n", g.name.c_str(),
                static_cast<unsigned long>(g.blocks), static_cast<unsigned long>(g.block_bytes),
                g.bytes / 1048576.0);
  }
  std::printf("  plain           %8zu blocks of %8lu B (same bytes)\n%6s %12s %12s %8s\n",
              plain.w.blocks.size(), static_cast<unsigned long>(plain.w.item_bytes), "pair",
              "hybrid GB/s", "plain GB/s", "ratio");
  std::fflush(stdout);
  std::vector<double> pair_ratios;
  for (int r = 0; r < args.rounds; ++r) {
    Arm& first = r % 2 == 0 ? hybrid : plain;
    Arm& second = r % 2 == 0 ? plain : hybrid;
    PDKV_RETURN_IF_ERROR(timed_round(first));
    PDKV_RETURN_IF_ERROR(timed_round(second));
    pair_ratios.push_back(hybrid.gbps.back() / plain.gbps.back());
    std::printf("%6d %12.3f %12.3f %8.3f\n", r, hybrid.gbps.back(), plain.gbps.back(),
                pair_ratios.back());
  }
  PDKV_RETURN_IF_ERROR(verify_arm(hybrid));
  PDKV_RETURN_IF_ERROR(verify_arm(plain));
  const bool hybrid_ok = hybrid.bad_block == hybrid.w.blocks.size();
  const bool plain_ok = plain.bad_block == plain.w.blocks.size();
  const bool verified = hybrid_ok && plain_ok;
  const double value = median(hybrid.gbps);
  const double baseline = median(plain.gbps);
  const double ratio = value / baseline;
  std::printf(
      "\n| id | hybrid GB/s (median) | plain GB/s (median) | ratio | target | verified |\n"
      "|---|---|---|---|---|---|\n| P12 | %.3f | %.3f | %.3f | >= %.2f | %s |\n",
      value, baseline, ratio, kTarget, verified ? "yes" : "NO");
  if (!hybrid_ok) {
    std::printf("hybrid verification failed at block %zu (group %s)\n", hybrid.bad_block,
                group_of(hw, hybrid.bad_block).c_str());
  }
  if (!plain_ok) std::printf("plain verification failed at block %zu\n", plain.bad_block);

  if (!args.json_path.empty()) {
    nlohmann::json j;
    const Figure figure{value,
                        baseline,
                        ratio,
                        kTarget,
                        verified,
                        "the same bytes as one plain KV group of " +
                            std::to_string(plain.w.item_bytes) +
                            " B pages, same backend, rounds interleaved ABBA in the same run"};
    j["P12"] = figure_json(figure, {{"ratio_to_plain", ratio},
                                    {"verified", verified},
                                    {"pair_ratios", pair_ratios},
                                    {"pair_ratio_median", median(pair_ratios)},
                                    {"rounds", hybrid.gbps},
                                    {"plain_rounds", plain.gbps},
                                    {"groups", groups_json(hw)},
                                    {"plain_blocks", plain.w.blocks.size()},
                                    {"backend", args.backend},
                                    {"model", args.model},
                                    {"tokens", args.tokens},
                                    {"page", args.page},
                                    {"streams", options.tcp.streams},
                                    {"blocks", hybrid.w.blocks.size()},
                                    {"bytes_per_round", hybrid.w.payload_bytes}});
    PDKV_RETURN_IF_ERROR(write_json_file(args.json_path, j));
  }
  if (!verified) return data_loss("destination bytes do not match the source");
  return Status();
}

}  // namespace pdkv::bench
