// `pdkv bench engine --memory device --path cuda_ipc`: the engine workload from device
// memory of one process into device memory of another on this host through the cuda_ipc
// backend (mapped IPC handles, device-to-device copies), against the driver's own
// device-to-device copy of the same bytes in one process (one cuMemcpyDtoDAsync per
// round), rounds alternating in the same run. Key P10 with the real driver (target: >=
// 0.8 x the baseline), P10f with the fake driver (its copies are memcpy: for the record;
// what it proves is that every byte lands and how many driver copies a round takes).
// --peer-device N puts the receiver's memory on device N (across GPUs when N != 0).
//
// Thread safety: run one benchmark at a time.
#pragma once

#include "bench/engine/engine_bench.h"
#include "common/status.h"

namespace pdkv::bench {

Status run_engine_ipc_bench(const EngineBenchArgs& args);

}  // namespace pdkv::bench
