// Settings of the shm backend (ShmOptions::from).
//
// Each spec is the one place its setting's name, default, range and help text are written
// (common/setting_spec.h); docs/CONFIG.md's rows are generated from it.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/setting_spec.h"

namespace pdkv::engine::shm {

inline constexpr config::SettingSpec kShmCopyThreads =
    config::int_setting("PDKV_SHM_COPY_THREADS", 2, 1, 16)
        .described(
            "shm backend: threads copying one part with `process_vm_writev` (parts under 4 MiB use "
            "one); 2 measured best on 2 cores (engine/backends/shm/shm_backend.h)");

inline constexpr config::SettingSpec kShmPartBytes =
    config::int_setting("PDKV_SHM_PART_BYTES", int64_t{64} << 20, int64_t{1} << 20,
                        int64_t{1} << 30)
        .described(
            "shm backend: most bytes one write lease covers; the receiver validates and pins each "
            "part, so unregister_memory waits for at most one part per session");

inline constexpr config::SettingSpec kShmIoTimeoutMs =
    config::int_setting("PDKV_SHM_IO_TIMEOUT_MS", 5000, 100, 600000)
        .described(
            "shm backend: control-channel waits and lease length; a silent receiver fails batches "
            "after this, a sender never starts a copy after its lease ran out. Peer death (EOF, "
            "ESRCH) fails at once");

}  // namespace pdkv::engine::shm
