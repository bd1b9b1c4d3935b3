// Settings of the common layer: the process-wide logger and the cluster secret.
//
// Each spec is the one place its setting's name, default, range and help text are written
// (common/setting_spec.h); docs/CONFIG.md's rows are generated from it.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/setting_spec.h"

namespace pdkv::config {

inline constexpr std::string_view kLogLevels[] = {"trace", "debug", "info", "warn", "error", "off"};

inline constexpr SettingSpec kLogLevel =
    string_setting("PDKV_LOG_LEVEL", "info", kLogLevels)
        .process_wide()
        .described("level of the process-wide `pdkv` logger (stderr)");

inline constexpr SettingSpec kSecretFile =
    string_setting("PDKV_SECRET_FILE", "")
        .shown_default("unset (unauthenticated)")
        .shown_range(
            "path of a regular file, mode 600 (no group/other access), 32 – 4096 bytes, taken as "
            "they are (a text secret, all printable ASCII before its line ending, is read without "
            "that line ending)")
        .described(
            "the cluster secret every rank and the bootstrap server share (docs/SECURITY.md). Set: "
            "control-plane connections are ZeroMQ CURVE (authenticated and encrypted) and admit "
            "only members, data-plane sessions start with a mutual challenge-response, bootstrap "
            "writes must be signed, and with `PDKV_REGISTRY=etcd` route entries are signed and "
            "readers take only those that verify (all ranks must then have it). Unset: nothing is "
            "authenticated and every component says so at start. A file others can read, a missing,"
            " short or too long file, or one that is not a regular file (a FIFO is refused at once,"
            " not waited on) fails start-up, naming its size or kind. Create one with `head -c 32 "
            "/dev/urandom > secret && chmod 600 secret`; every engine backend (tcp, shm, ucx) runs "
            "the handshake with it");

}  // namespace pdkv::config
