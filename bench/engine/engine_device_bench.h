// `pdkv bench engine --memory device` (and --src-memory / --dst-memory for mixed pairs):
// the engine workload with the source and/or the destination in device memory, against
// the same workload in host memory measured in the same run (rounds alternate between
// the two arms, so load on the shared machine weighs on both alike). Key P9 with the real
// driver (target: the device arm >= 0.9 x the host arm, staging hidden behind the
// network), P9f with the fake driver (for the record: its copies are memcpy). Beside it,
// the raw pinned device<->host copy speed of the driver. Every destination byte of a
// final round of each arm is verified.
//
// Thread safety: run one benchmark at a time.
#pragma once

#include "bench/engine/engine_bench.h"
#include "common/status.h"

namespace pdkv::bench {

Status run_engine_device_bench(const EngineBenchArgs& args);

}  // namespace pdkv::bench
