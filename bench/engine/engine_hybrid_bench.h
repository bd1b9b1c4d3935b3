// `pdkv bench engine --model qwen3-next|gpt-oss|deepseek-v32` (P12): what a hybrid or sparse
// KV layout costs the engine, against the same bytes moved as one plain KV group.
//
// Two arms run side by side in one run, each with its own sender engine and receiver process
// on the chosen backend: the hybrid workload (engine_hybrid_workload.h: every group moved as
// a deployment moves it) and a plain workload of uniform llama-style pages summing to the
// same byte count. Their timed rounds alternate in ABBA order so a change of load during the
// run weighs on both alike. The figure (key "P12", target >= 0.9) is the median hybrid GB/s
// over the median plain GB/s; every destination byte of both arms is verified afterwards.
//
// Thread safety: run one benchmark at a time (it loads the machine).
#pragma once

#include "bench/engine/engine_bench.h"
#include "common/status.h"

namespace pdkv::bench {

// Prints each round pair and the figure, writes args.json_path if set. InvalidArgument for
// --decode-tp, --head-split or --pairs other than 1. OK only if both arms' bytes verified.
Status run_engine_hybrid_bench(const EngineBenchArgs& args);

}  // namespace pdkv::bench
