// Settings of the ucx backend (UcxOptions::from). Declared even where UCX is not built, so
// pdkv.Config and the docs are the same in every build.
//
// Each spec is the one place its setting's name, default, range and help text are written
// (common/setting_spec.h); docs/CONFIG.md's rows are generated from it.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/setting_spec.h"

namespace pdkv::engine::ucx {

inline constexpr std::string_view kUcxErrModes[] = {"auto", "peer", "none"};

inline constexpr config::SettingSpec kUcxTls =
    config::string_setting("PDKV_UCX_TLS", "")
        .shown_default("empty")
        .shown_range("UCX_TLS syntax (`tcp`, `posix,sysv,cma,self`, `rc,self`, ...)")
        .described(
            "ucx backend: transports UCX may use; empty = `UCX_TLS` from the environment, else all."
            " Each endpoint logs the transports it got and warns when it fell back to tcp");

inline constexpr config::SettingSpec kUcxErrMode =
    config::string_setting("PDKV_UCX_ERR_MODE", "auto", kUcxErrModes)
        .described(
            "ucx backend: UCP error handling; `auto` = PEER when only tcp/self are allowed, else "
            "NONE (UCX 1.13 drops posix/sysv/cma from PEER endpoints, a silent tcp fallback); peer "
            "death is also caught on the control channel");

inline constexpr config::SettingSpec kUcxIoTimeoutMs =
    config::int_setting("PDKV_UCX_IO_TIMEOUT_MS", 5000, 100, 600000)
        .described(
            "ucx backend: control-channel waits and lease length; a part not flushed within it "
            "force-closes the endpoint and fails the batch");

inline constexpr config::SettingSpec kUcxMaxWorkers =
    config::int_setting("PDKV_UCX_MAX_WORKERS", 256, 2, 65536)
        .described(
            "ucx backend: most UCP workers at once, one per peer sent to and one per session "
            "received from (each a thread; ~4 MiB of rings over posix/sysv, ~80 KiB over tcp). Past"
            " it a connect fails and a sender's hello is refused, both naming this setting");

inline constexpr config::SettingSpec kUcxPartBytes =
    config::int_setting("PDKV_UCX_PART_BYTES", int64_t{64} << 20, int64_t{1} << 20,
                        int64_t{1} << 30)
        .described("ucx backend: most bytes per lease and per `ucp_ep_flush_nbx`");

}  // namespace pdkv::engine::ucx
