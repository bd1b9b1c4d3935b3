// Adds `pdkv bench engine` (see bench/engine/engine_bench.h).
#include <cstdio>

#include "bench/engine/engine_auth_ab.h"
#include "bench/engine/engine_bench.h"
#include "bench/engine/engine_device_bench.h"
#include "bench/engine/engine_hybrid_bench.h"
#include "bench/engine/engine_ipc_bench.h"
#include "bench/engine/engine_hybrid_workload.h"
#include "cli/commands.h"

namespace pdkv::cli {

void add_engine_bench_command(CLI::App& bench) {
  auto args = std::make_shared<pdkv::bench::EngineBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "engine",
      "Transfer-engine throughput (GB/s) of one model's KV between two processes, against "
      "the backend's raw transport measured in the same run (P1, P1s in BENCHMARKS.md)");
  cmd->add_option("--backend", args->backend,
                  "tcp (against iperf3), shm (against a single-thread memcpy; P2) or ucx "
                  "(against ucx_perftest; P3)")
      ->capture_default_str();
  cmd->add_option("--ucx-tls", args->ucx_tls, "UCX transports for --backend ucx (e.g. tcp, posix)");
  cmd->add_option("--model", args->model,
                  "llama3-8b, deepseek-v3 or tiny; qwen3-next, gpt-oss or deepseek-v32: the hybrid "
                  "and sparse layouts against the same bytes as one plain KV group (P12)")
      ->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "prompt length in tokens")->capture_default_str();
  cmd->add_option("--page", args->page,
                  "page size in tokens (16: P1; 1: scattered 2 KiB blocks, P1s)")
      ->capture_default_str();
  cmd->add_option("--streams", args->streams,
                  "TCP streams for the engine and iperf3 (0 = engine default)")
      ->capture_default_str();
  cmd->add_option("--rounds", args->rounds, "timed rounds (median reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--iperf-seconds", args->iperf_seconds, "iperf3 -t")->capture_default_str();
  cmd->add_option("--json", args->json_path, "write the figures as JSON to this file");
  cmd->add_option("--seed", args->seed, "page shuffle seed")->capture_default_str();
  cmd->add_option("--decode-tp", args->decode_tp,
                  "the receiver holds 1/N of the model's heads (bytes per token / N)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--head-split", args->head_split,
                  "heterogeneous TP: the sender holds 1/N of each destination token (prefill TP "
                  "= N x decode TP; one block per token)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--pairs", args->pairs,
                  "sender/receiver pairs moving their rounds at the same time (aggregate "
                  "GB/s); 4 with --tokens 16384 --decode-tp 2 --head-split 2 move one round "
                  "of the e2e scale case with the engines alone (P6e)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_flag("--auth-ab", args->auth_ab,
                "what the cluster secret costs: the same workload with and without it "
                "(PDKV_SECRET_FILE), rounds alternating in one run (JSON key P1_auth)");
  cmd->add_option_function<std::string>(
         "--auth-ab-first", [args](const std::string& v) { args->auth_ab_on_first = v == "on"; },
         "with --auth-ab: which arm starts first (off or on)")
      ->check(CLI::IsMember({"off", "on"}));
  const auto memory = CLI::IsMember({"host", "device"});
  cmd->add_option_function<std::string>(
         "--memory", [args](const std::string& v) { args->src_memory = args->dst_memory = v; },
         "host or device: the source and the destination live there, and the same transfer "
         "between host memories is measured in the same run (P9 with --device cuda, P9f "
         "with --device fake)")
      ->check(memory)
      ->option_text("KIND");
  cmd->add_option("--src-memory", args->src_memory, "host or device (mixed pairs)")
      ->check(memory)
      ->option_text("KIND");
  cmd->add_option("--dst-memory", args->dst_memory, "host or device (mixed pairs)")
      ->check(memory)
      ->option_text("KIND");
  cmd->add_option("--device", args->device_driver,
                  "the driver for device memory: cuda (libcuda.so.1, or PDKV_CUDA_LIBRARY) or "
                  "fake (pdkv's fake driver: its copies are memcpy, so the figure proves "
                  "nothing about a GPU)")
      ->check(CLI::IsMember({"cuda", "fake"}))
      ->option_text("DRIVER [cuda]");
  cmd->add_option("--path", args->path,
                  "cuda_ipc: device memory to device memory of a process on this host through "
                  "CUDA IPC handles and device-to-device copies, against the driver's own "
                  "device-to-device copy in one process (P10 with --device cuda, P10f with "
                  "--device fake)")
      ->check(CLI::IsMember({"cuda_ipc"}));
  cmd->add_option("--peer-device", args->peer_device,
                  "with --path cuda_ipc: the receiver's device (another GPU: across GPUs)")
      ->check(CLI::Range(0, 63))
      ->capture_default_str();
  cmd->callback([args] {
    const bool device = args->src_memory == "device" || args->dst_memory == "device";
    const bool hybrid = pdkv::bench::is_hybrid_preset(args->model);
    const bool ipc = args->path == "cuda_ipc";
    pdkv::Status st = args->auth_ab ? pdkv::bench::run_engine_auth_ab(*args)
                      : ipc         ? pdkv::bench::run_engine_ipc_bench(*args)
                      : device      ? pdkv::bench::run_engine_device_bench(*args)
                      : hybrid      ? pdkv::bench::run_engine_hybrid_bench(*args)
                                    : pdkv::bench::run_engine_bench(*args);
    if (!st.ok()) {
      std::fprintf(stderr, "pdkv bench engine: %s\n", st.to_string().c_str());
      pdkv::cli::set_exit_code(1);
    }
  });
}

}  // namespace pdkv::cli
