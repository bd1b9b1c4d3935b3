#include "bench/engine/engine_auth_ab.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/engine/engine_bench_util.h"
#include "common/clock.h"

namespace pdkv::bench {
namespace {

constexpr double kTarget = 0.97;  // the cluster secret may cost P1 at most 3 %

// One side of the comparison: its own receiver process, destination and sender engine.
struct Arm {
  const char* name = "";
  std::unique_ptr<BenchLink> link;
  std::vector<double> gbps;
  bool verified = false;
};

// `secret`: the arm authenticates (its receiver inherits PDKV_SECRET_FILE); otherwise
// neither its sender nor its receiver has a secret.
Result<std::unique_ptr<Arm>> start_arm(const char* name, bool secret, const Workload& w,
                                       const SourceMemory& src, engine::EngineOptions options) {
  auto arm = std::make_unique<Arm>();
  arm->name = name;
  std::vector<std::string> env = {"PDKV_ENGINE_BACKEND=" + options.backend};
  if (!secret) {
    env.push_back("PDKV_SECRET_FILE=");
    options.cluster_key.reset();
  }
  PDKV_ASSIGN_OR_RETURN(arm->link, start_link(w, src, options, env));
  // One untimed round faults the destination pages in.
  PDKV_RETURN_IF_ERROR(arm->link->round(std::string(name) + " warm-up round"));
  return arm;
}

Status timed_round(Arm& arm, const Workload& w) {
  const TimePoint start = now();
  PDKV_RETURN_IF_ERROR(arm.link->round(std::string(arm.name) + " round"));
  arm.gbps.push_back(static_cast<double>(w.payload_bytes) / elapsed_s(start) / kGiga);
  return Status();
}

Status verify_arm(Arm& arm, const Workload& w, const SourceMemory& src) {
  PDKV_ASSIGN_OR_RETURN(
      const size_t bad,
      arm.link->verification_round(w, src, std::string(arm.name) + " verification round"));
  arm.verified = bad == w.blocks.size();
  return Status();
}

}  // namespace

Status run_engine_auth_ab(const EngineBenchArgs& args) {
  if (args.backend != "tcp") return invalid_argument("--auth-ab measures the tcp backend (P1)");
  PDKV_ASSIGN_OR_RETURN(Workload w, bench_workload(args));
  PDKV_ASSIGN_OR_RETURN(engine::EngineOptions options, engine::EngineOptions::from_env());
  if (!options.cluster_key) {
    return invalid_argument(
        "--auth-ab needs PDKV_SECRET_FILE: the secret of the authenticated arm");
  }
  options.backend = args.backend;
  if (args.streams > 0) options.tcp.streams = args.streams;

  SourceMemory src(w.layout_bytes);
  if (src.data == nullptr) return internal_error("cannot map the source layout");
  engine::testing::fill_pattern(src.data, src.size, args.seed);
  // Which arm starts first is a setting: in the e2e comparison the cluster started second
  // ran 2-3 % faster with no secret on either side, so runs alternate it.
  std::unique_ptr<Arm> off, on;
  for (bool secret : {args.auth_ab_on_first, !args.auth_ab_on_first}) {
    PDKV_ASSIGN_OR_RETURN(std::unique_ptr<Arm> arm,
                          start_arm(secret ? "on" : "off", secret, w, src, options));
    (secret ? on : off) = std::move(arm);
  }

  std::printf(
      "pdkv bench engine --auth-ab: model %s, %lu tokens, page %lu, %.1f MiB per round, "
      "%d streams, %d rounds per arm, ABBA order\n%6s %10s %10s %8s\n",
      args.model.c_str(), static_cast<unsigned long>(w.tokens),
      static_cast<unsigned long>(w.page_tokens), w.payload_bytes / 1048576.0, options.tcp.streams,
      args.rounds, "pair", "off GB/s", "on GB/s", "on/off");
  std::vector<double> ratios;
  for (int r = 0; r < args.rounds; ++r) {
    Arm& first = r % 2 == 0 ? *off : *on;
    Arm& second = r % 2 == 0 ? *on : *off;
    PDKV_RETURN_IF_ERROR(timed_round(first, w));
    PDKV_RETURN_IF_ERROR(timed_round(second, w));
    ratios.push_back(on->gbps.back() / off->gbps.back());
    std::printf("%6d %10.3f %10.3f %8.3f\n", r, off->gbps.back(), on->gbps.back(), ratios.back());
  }
  PDKV_RETURN_IF_ERROR(verify_arm(*off, w, src));
  PDKV_RETURN_IF_ERROR(verify_arm(*on, w, src));
  const bool verified = off->verified && on->verified;
  const double ratio = median(ratios);
  std::printf(
      "\n| id | on GB/s (median) | off GB/s (median) | on/off (median of pairs) | target | "
      "verified |\n|---|---|---|---|---|---|\n| P1_auth | %.3f | %.3f | %.3f | >= %.2f | %s |\n",
      median(on->gbps), median(off->gbps), ratio, kTarget, verified ? "yes" : "NO");

  if (!args.json_path.empty()) {
    nlohmann::json j;
    const Figure figure{median(on->gbps),
                        median(off->gbps),
                        ratio,
                        kTarget,
                        verified,
                        "the same workload without a cluster secret, rounds interleaved ABBA "
                        "in the same run; ratio = median of the per-pair on/off ratios"};
    j["P1_auth"] = figure_json(figure, {{"pair_ratios", ratios},
                                        {"on_rounds", on->gbps},
                                        {"off_rounds", off->gbps},
                                        {"model", args.model},
                                        {"tokens", args.tokens},
                                        {"page", args.page},
                                        {"streams", options.tcp.streams},
                                        {"bytes_per_round", w.payload_bytes},
                                        {"started_first", args.auth_ab_on_first ? "on" : "off"}});
    PDKV_RETURN_IF_ERROR(write_json_file(args.json_path, j));
  }
  if (!verified) return data_loss("destination bytes do not match the source");
  return Status();
}

}  // namespace pdkv::bench
