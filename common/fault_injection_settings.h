// Settings of the fault-injection shim (robustness/chaos/fault_shim.c, an LD_PRELOAD library in C
// that links nothing of pdkv and reads them with getenv). Declared in the lowest layer so
// the catalog documents them with the rest; never a pdkv.Config field.
//
// These specs are the documentation (docs/CONFIG.md's rows are generated from them); the
// shim, being C outside the library, parses the variables itself and keeps its own copy
// of the defaults, so a change here is made there too.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/setting_spec.h"

namespace pdkv::config {

inline constexpr std::string_view kFaultModes[] = {"fail", "short", "stall"};
inline constexpr std::string_view kFaultErrnos[] = {"ECONNRESET", "EIO"};

inline constexpr SettingSpec kFaultEveryN =
    int_setting("PDKV_FAULT_EVERY_N", 0, 0, int64_t{1} << 31)
        .process_wide()
        .noted("(off)")
        .described(
            "inject a fault on every N-th matching socket call (counted over the process, all "
            "threads)");

inline constexpr SettingSpec kFaultMode =
    string_setting("PDKV_FAULT_MODE", "fail", kFaultModes)
        .process_wide()
        .described(
            "fail: the connection is shut down (`shutdown(SHUT_RDWR)`, so both ends see it die, as "
            "on a reset) and the call returns -1 with `PDKV_FAULT_ERRNO` (connect: ECONNREFUSED, no"
            " connection); short: send/write/recv/read move at most half the bytes asked "
            "(sendmsg/recvmsg: half of the first iovec); stall: sleep `PDKV_FAULT_STALL_MS`, then "
            "do the call");

inline constexpr SettingSpec kFaultErrno =
    string_setting("PDKV_FAULT_ERRNO", "ECONNRESET", kFaultErrnos)
        .process_wide()
        .described("errno of a failed call in mode fail");

inline constexpr SettingSpec kFaultStallMs =
    int_setting("PDKV_FAULT_STALL_MS", 200, 0, int64_t{1} << 31)
        .process_wide()
        .described("sleep before the call in mode stall");

inline constexpr SettingSpec kFaultCalls =
    string_setting("PDKV_FAULT_CALLS", "")
        .process_wide()
        .shown_default("all")
        .shown_range("comma list of send, sendmsg, recv, recvmsg, connect, write, read")
        .described("which wrapped calls count and get faults");

inline constexpr SettingSpec kFaultSkip =
    int_setting("PDKV_FAULT_SKIP", 0, 0, INT64_MAX)
        .process_wide()
        .shown_range("0 – 2^63")
        .described(
            "let this many matching calls through before counting (start-up and registration)");

inline constexpr SettingSpec kFaultMax =
    int_setting("PDKV_FAULT_MAX", 0, 0, INT64_MAX)
        .process_wide()
        .noted("(never stop)")
        .shown_range("0 – 2^63")
        .described(
            "stop after injecting this many faults: a transient burst, after which the process must"
            " heal");

inline constexpr SettingSpec kFaultPrefix =
    string_setting("PDKV_FAULT_PREFIX", "")
        .process_wide()
        .shown_default("unset (every call)")
        .shown_range("up to 32 bytes as hex")
        .described(
            "only sends whose data starts with these bytes count and get faults (e.g. the ACK "
            "frame's first bytes, to fault acknowledgements and nothing else); receives never "
            "match");

}  // namespace pdkv::config
