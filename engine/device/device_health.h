// DeviceHealth: whether this process's device path still works.
//
// Some driver errors are fatal to the CUDA context: after an illegal address, a launch
// failure or their kind, "any further CUDA work will return the same error" until the
// process is relaunched. No retry, fresh stream or new batch can help, so the first such
// error is kept here as the process's device fault: the transfer engine fails every batch
// that reads device memory with it at once, the KV managers fail every room whose pools
// are device memory with it (their timers look each tick), host-memory work goes on, and
// the fault is reported (metric pdkv_device_healthy, Python pdkv.device_health()) so an
// orchestrator can replace the process.
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include "common/status.h"

namespace pdkv::engine {

// Whether a CUresult is one the reference calls fatal to the context.
bool is_sticky_device_error(int cuda_result);

// Records `fault` as the process's device fault, if none was recorded yet (logged once).
// A fault never clears.
void report_device_fault(const Status& fault);

// OK while the device path is healthy; else the first fatal error, as the driver call
// that met it reported it.
Status device_fault();
bool device_healthy();

}  // namespace pdkv::engine
