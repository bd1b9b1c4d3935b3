// Settings of the cuda_ipc backend (CudaIpcOptions::from).
//
// Each spec is the one place its setting's name, default, range and help text are written
// (common/setting_spec.h); docs/CONFIG.md's rows are generated from it.
#pragma once

#include <cstdint>

#include "common/setting_spec.h"

namespace pdkv::engine::cuda_ipc {

inline constexpr config::SettingSpec kCudaIpcIoTimeoutMs =
    config::int_setting("PDKV_CUDA_IPC_IO_TIMEOUT_MS", 5000, 100, 600000)
        .described(
            "cuda_ipc backend: control-channel waits, handle-table fetches and lease length; a "
            "silent receiver fails batches after this, a writer never starts a copy after its "
            "lease ran out");

inline constexpr config::SettingSpec kCudaIpcPartBytes =
    config::int_setting("PDKV_CUDA_IPC_PART_BYTES", int64_t{256} << 20, int64_t{1} << 20,
                        int64_t{4} << 30)
        .described(
            "cuda_ipc backend: most bytes one write lease covers (one validated descriptor list, "
            "one set of device copies, one completion event)");

}  // namespace pdkv::engine::cuda_ipc
