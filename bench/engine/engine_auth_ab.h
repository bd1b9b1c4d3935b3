// `pdkv bench engine --auth-ab`: what the cluster secret costs P1, measured so that this
// shared machine's noise cancels instead of deciding the figure.
//
// Two arms run side by side in one run: a sender engine with the secret
// (PDKV_SECRET_FILE) writing to a receiver process with it, and a sender without a
// secret writing to a receiver without one, same workload, same processes' lifetime.
// Their timed rounds alternate in ABBA order (off on, on off, ...), so a change of load
// during the run weighs on both arms alike; the figure is the median of the per-pair
// on/off ratios (key "P1_auth", target >= 0.97: the secret costs at most 3 %). Separate runs
// for each arm spread by 10-20 % here, far more than the cost being measured.
#pragma once

#include "bench/engine/engine_bench.h"
#include "common/status.h"

namespace pdkv::bench {

// Needs PDKV_SECRET_FILE (the authenticated arm's secret). Prints each round and the
// figure, writes args.json_path if set. OK only if both arms' bytes verified.
Status run_engine_auth_ab(const EngineBenchArgs& args);

}  // namespace pdkv::bench
