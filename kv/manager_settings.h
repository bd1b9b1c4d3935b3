// Settings of a KV manager (KvManagerOptions::from).
//
// Each spec is the one place its setting's name, default, range and help text are written
// (common/setting_spec.h); docs/CONFIG.md's rows are generated from it.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/setting_spec.h"

namespace pdkv::kv {

inline constexpr config::SettingSpec kBootstrapTimeoutS =
    config::double_setting("PDKV_BOOTSTRAP_TIMEOUT_S", 120.0, 0.1, 86400.0)
        .described(
            "from KVSender/KVReceiver construction until the room is bootstrapped (route resolved, "
            "every pre-allocation in); then the room is Failed with this reason. 120 s as in the "
            "reference: the clock starts when the request reaches this rank, and a decode may "
            "legitimately hold a request back until it has free pages.");

inline constexpr config::SettingSpec kWaitingTimeoutS =
    config::double_setting("PDKV_WAITING_TIMEOUT_S", 300.0, 0.1, 86400.0)
        .described(
            "from bootstrapped until the room ends (Success or Failed). Covers a prefill queueing "
            "the request behind others; 300 s as in the reference, but here it actually fires (the "
            "reference's never did, so a room whose peer vanished hung forever), whatever a writer "
            "still sends: a part still landing a second after its room ended is cut and its "
            "connection closed, so bytes trickled into it cannot keep the room alive "
            "(kv/decode/fencing_test.cc).");

inline constexpr config::SettingSpec kRouteAttemptTimeoutS =
    config::double_setting("PDKV_ROUTE_ATTEMPT_TIMEOUT_S", 2.0, 0.05, 600.0)
        .described(
            "decode: longest single route lookup attempt (the bootstrap server's or etcd's answer "
            "for a room's prefill instance); a failed attempt is retried until the room's "
            "bootstrap timeout, and counts towards `PDKV_ROUTE_BREAKER_FAILURES`. The address a "
            "room names comes from the request: short attempts let a dead host, a closed port or "
            "a server that never answers be noticed in seconds instead of a bootstrap timeout.");

inline constexpr config::SettingSpec kRouteBreakerFailures =
    config::int_setting("PDKV_ROUTE_BREAKER_FAILURES", 3, 1, 1000)
        .described(
            "decode: after this many route lookup attempts in a row failed for one prefill "
            "instance address (each up to `PDKV_ROUTE_ATTEMPT_TIMEOUT_S`), the rooms naming it "
            "fail at once with the last cause (`bootstrap_failed`) for "
            "`PDKV_ROUTE_BREAKER_BACKOFF_S`; then one lookup probes it again (its success closes "
            "the breaker). Other instances' rooms are never affected: each instance's rooms are "
            "resolved on their own thread. An instance that is not registered yet counts as "
            "failing too (python/tests/test_kv_resolution.py).");

inline constexpr config::SettingSpec kRouteBreakerBackoffS =
    config::double_setting("PDKV_ROUTE_BREAKER_BACKOFF_S", 5.0, 0.01, 3600.0)
        .described(
            "decode: how long rooms naming a prefill instance whose lookups keep failing fail at "
            "once (see `PDKV_ROUTE_BREAKER_FAILURES`) before one lookup probes it again.");

inline constexpr config::SettingSpec kMaxResolvingInstances =
    config::int_setting("PDKV_MAX_RESOLVING_INSTANCES", 64, 1, 4096)
        .described(
            "decode: most prefill instances whose rooms are being resolved at once (one thread "
            "each, gone when its rooms are). A room naming yet another instance past it fails at "
            "once (`bootstrap_failed`) with the reason, so requests naming many unreachable "
            "addresses cannot make a decode hold unbounded threads "
            "(`test_rooms_naming_more_instances_than_the_bound_fail_at_once`).");

inline constexpr config::SettingSpec kMetadataTimeoutS =
    config::double_setting("PDKV_METADATA_TIMEOUT_S", 10.0, 0.01, 3600.0)
        .described(
            "with `wait_for_prefill_metadata`, the longest a finished transfer waits for the first "
            "token before the room fails. The token is sampled right after the forward that wrote "
            "the KV, so seconds are already generous.");

inline constexpr config::SettingSpec kHeartbeatIntervalS =
    config::double_setting("PDKV_HEARTBEAT_INTERVAL_S", 0.5, 0.05, 60.0)
        .described(
            "period of the per-rank liveness probe: each decode pings the prefill ranks it uses, "
            "each prefill the decode ranks it holds rooms for (a ZeroMQ Ping, answered by a Pong "
            "that never waits behind other messages). Any message from a peer counts as a sign of "
            "life.");

inline constexpr config::SettingSpec kHeartbeatMaxFailures =
    config::int_setting("PDKV_HEARTBEAT_MAX_FAILURES", 3, 1, 100)
        .described(
            "a peer is dead when this many probes went unanswered and nothing was heard from it for"
            " interval x this (0.5 s x 3 = 1.5 s): the fallback for a silent peer (cut link, dead "
            "host). Counting probes means a stall of this process (not scheduled, its timer late) "
            "never counts against the peer. A peer whose process died is detected sooner, by its "
            "control connection closing and refusing reconnection (typically under 0.1 s on one "
            "host).");

inline constexpr config::SettingSpec kBootstrapRefreshS =
    config::double_setting("PDKV_BOOTSTRAP_REFRESH_S", 2.0, 0.0, 3600.0)
        .described(
            "a prefill rank registers with the bootstrap server again this often (0 = only at "
            "start), so a restarted, empty server learns every live rank within this long; the "
            "server logs only registrations that change its table. With `PDKV_REGISTRY=etcd` a "
            "refresh of an unchanged entry does nothing: the lease keep-alive holds the route, and "
            "re-publishes it if the lease was lost.");

inline constexpr config::SettingSpec kFailedPeerTtlS =
    config::double_setting("PDKV_FAILED_PEER_TTL_S", 30.0, 0.0, 3600.0)
        .described(
            "longest refusal of a decode whose transfers keep failing (0 = never refused). After a "
            "write batch fails for want of the decode (its connection failed "
            "`PDKV_TRANSFER_ATTEMPTS` times, or the decode went silent past the I/O timeout; a "
            "write the decode refuses fails only its own room), transfers to that decode are "
            "refused for `PDKV_FAILED_PEER_COOLDOWN_S`, twice as long after each further failure in"
            " a row (of an attempt begun after the last failure: attempts in flight when it opened "
            "count once), at most this long; then one transfer is let through as a probe, or at "
            "once when the decode sends a pre-allocation. A success, a new registration from the "
            "peer (it restarted) or this long without failures lifts the refusal. The reference "
            "refused for the whole 30 s after one failure, so a single reset failed every room to a"
            " healthy decode for 30 s.");

inline constexpr config::SettingSpec kFailedPeerCooldownS =
    config::double_setting("PDKV_FAILED_PEER_COOLDOWN_S", 1.0, 0.001, 3600.0)
        .described(
            "first refusal after a failed transfer (capped at the TTL), so rooms queued behind a "
            "dead decode fail at once while a healthy one is tried again a second later.");

inline constexpr config::SettingSpec kTransferAttempts =
    config::int_setting("PDKV_TRANSFER_ATTEMPTS", 3, 1, 10)
        .described(
            "tries of one write batch when its connection fails (refused, reset, handshake: "
            "kUnavailable), each on a new connection, 50 ms then 100 ms apart. A batch is "
            "idempotent (same bytes to the same addresses, read by nobody before the status), so a "
            "retry cannot leave wrong bytes. Validation errors, rejected writes and stalls (the I/O"
            " timeout) are not retried.");

inline constexpr config::SettingSpec kTransferWindowBytes =
    config::int_setting("PDKV_TRANSFER_WINDOW_BYTES", int64_t{64} << 20, int64_t{1} << 16,
                        int64_t{1} << 40)
        .noted("(64 MiB)")
        .described(
            "prefill data path: bytes written to one decode rank but not yet acknowledged. Batches "
            "are submitted without waiting while the window has room, so a slow or stopped decode "
            "backs pressure up to its own rooms only (others go on); planned but unsent bytes are "
            "bounded by the same amount per decode. 64 MiB is 32 full batches, enough to keep a "
            "session's 4 TCP streams busy at loopback speed; not yet tuned by a sweep");

inline constexpr config::SettingSpec kTransferBatchBytes =
    config::int_setting("PDKV_TRANSFER_BATCH_BYTES", int64_t{4} << 20, int64_t{4} << 10,
                        int64_t{1} << 32)
        .noted("(4 MiB)")
        .described(
            "most bytes per engine batch: blocks of several rooms bound for one decode rank that "
            "are ready together share a batch (one header, one acknowledgement), and a larger room "
            "is cut into several batches so it is pipelined. Batches of 2 MiB and more are spread "
            "over the session's TCP streams");

inline constexpr config::SettingSpec kVerifyChecksum =
    config::bool_setting("PDKV_VERIFY_CHECKSUM", false)
        .described(
            "end-to-end check: the prefill sums (crc32c) the bytes it sends to each decode rank and"
            " sends the sum with the list of destination regions in its status; the decode checks "
            "every region lies in its registered memory, re-reads it, and fails the room (cause "
            "`checksum_mismatch`, `pdkv.FailureCause.ChecksumMismatch`) on a mismatch. Off by "
            "default because it costs one pass over the bytes on each side (the SSE4.2 crc32 "
            "instruction: several GB/s per core); set it on both sides — a decode that checks fails"
            " closed on a prefill that does not.");

inline constexpr config::SettingSpec kStatusInBand =
    config::bool_setting("PDKV_STATUS_IN_BAND", true)
        .described(
            "prefill: a room's Success status rides its last data batch as a batch note "
            "(`kv/pipeline/status_note.h`, `engine/batch_note.h`; tcp backend only): the decode's "
            "engine "
            "hands it over after every byte of that batch landed, so the decode learns the room is "
            "complete without waiting for the acknowledgement to travel back and a ZeroMQ message "
            "to follow (about half of a small request's latency, P5). Used for each decode rank of "
            "a room whose last batch to it carries its remaining bytes, when checksums are off and "
            "the first token is known (or not waited for); otherwise, and when off, the status is a"
            " ZeroMQ message after the acknowledgement");

inline constexpr config::SettingSpec kMaxDecodePeers =
    config::int_setting("PDKV_MAX_DECODE_PEERS", 4096, 1, int64_t{1} << 20)
        .described(
            "prefill: most decode ranks registered at once; a registration from a new decode past "
            "it is refused with this reason (its rooms fail as a layout refusal), so a flood of "
            "registrations cannot grow the table. A decode restarting at the same endpoint reuses "
            "its slot");

inline constexpr config::SettingSpec kMaxPendingRooms =
    config::int_setting("PDKV_MAX_PENDING_ROOMS", 65536, 1, int64_t{1} << 24)
        .described(
            "prefill: most rooms held for decodes before this rank's `KVSender` for them exists "
            "(early pre-allocations and aborts); past it a pre-allocation is refused (the decode's "
            "room fails with the reason) and an early abort is dropped. Such rooms expire after the"
            " bootstrap timeout, and rooms with a sender are never counted");

inline constexpr config::SettingSpec kMaxPendingRoomsPerDecode =
    config::int_setting("PDKV_MAX_PENDING_ROOMS_PER_DECODE", 8192, 1, int64_t{1} << 24)
        .described(
            "prefill: of those rooms, most one decode rank opened (its first pre-allocation or "
            "abort of the room came before the `KVSender`); past it that decode's next such room is"
            " refused with the reason, other decodes are unaffected. Without a cluster secret "
            "anyone can register as a decode, so this keeps one registration from taking the whole "
            "`PDKV_MAX_PENDING_ROOMS`");

inline constexpr config::SettingSpec kMaxPendingBytesPerDecode =
    config::int_setting("PDKV_MAX_PENDING_BYTES_PER_DECODE", int64_t{1} << 28, int64_t{1} << 16,
                        int64_t{1} << 40)
        .described(
            "prefill: most bytes of pre-allocations (page and slot lists, 8 bytes per entry, ~512 "
            "bytes of bookkeeping, and the TP fragments a pre-allocation carries itself, when they "
            "are neither the registration's nor the last room's) one decode rank has waiting for "
            "their `KVSender`; past it its next pre-allocation is refused with the reason. A "
            "decode's pre-allocations name the fragment list its registration carried "
            "(kv/prefill/destination_plan.h); 1024 pending rooms of `pdkv bench e2e --case scale` "
            "hold well"
            " under 1 MiB");

inline constexpr config::SettingSpec kLocalIp =
    config::string_setting("PDKV_LOCAL_IP", "")
        .shown_default("(detected)")
        .shown_range("an IP address")
        .described("the address this rank advertises for its control and transfer endpoints.");

inline constexpr config::SettingSpec kMetricsPort =
    config::int_setting("PDKV_METRICS_PORT", -1, -1, 65535)
        .noted("(none)")
        .shown_range("-1, 0 (any free port) or 1–65535")
        .described(
            "a Python `KVManager` with a port (>= 0) starts or joins its process's one Prometheus "
            "endpoint (`GET /metrics`: every KV manager alive in the process, see \"Metrics\" "
            "below; `GET /health`) on `PDKV_METRICS_HOST`. 0 joins the endpoint already running "
            "(else starts one on a free port; read `KVManager.metrics_port`); a fixed port other "
            "than the running one is an error naming it. Off by default: an engine can put pdkv's "
            "families on its own /metrics instead (`pdkv.metrics.register`), and several processes "
            "on a host need a port each.");

inline constexpr config::SettingSpec kMetricsHost =
    config::string_setting("PDKV_METRICS_HOST", "127.0.0.1")
        .shown_range("an IP address or host name")
        .described(
            "interface of that endpoint. Loopback by default: /metrics names the cluster's peers "
            "and traffic, so opening it to a scraper on another host (`0.0.0.0` or an interface's "
            "address) is an operator's choice.");

}  // namespace pdkv::kv
