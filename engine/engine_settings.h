// Settings of the transfer engine and its default backend, tcp (EngineOptions::from), and
// of the CUDA driver it opens at run time.
//
// Each spec is the one place its setting's name, default, range and help text are written
// (common/setting_spec.h); docs/CONFIG.md's rows are generated from it.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/setting_spec.h"

namespace pdkv::engine {

inline constexpr std::string_view kEngineBackends[] = {"auto", "tcp", "shm", "ucx", "cuda_ipc"};

inline constexpr config::SettingSpec kEngineBackend =
    config::string_setting("PDKV_ENGINE_BACKEND", "tcp", kEngineBackends)
        .described(
            "transfer backend of every TransferEngine created from the environment. `auto` runs "
            "every backend built in and picks the fastest path per peer from what both engines "
            "advertise (README, \"Which path when\"; opt-in until its path channel bounds "
            "connections as the tcp listener does); a named backend is the only one used, for "
            "every peer (every engine of a cluster needs the same choice: an `auto` engine's "
            "endpoint is its path channel). A backend not built into the binary fails start-up "
            "with FailedPrecondition");

inline constexpr std::string_view kEnginePathFloors[] = {"cuda_ipc", "shm", "ucx", "tcp_staged",
                                                         "tcp"};

inline constexpr config::SettingSpec kEngineRequirePath =
    config::string_setting("PDKV_ENGINE_REQUIRE_PATH", "tcp", kEnginePathFloors)
        .described(
            "refuse a peer (`open_session` fails with FailedPrecondition naming why each faster "
            "path was impossible) rather than reach it over a path slower than this one, in the "
            "fixed ranking cuda_ipc > shm > ucx > tcp_staged > tcp; e.g. `shm` for a single-host "
            "deployment that must never fall back to loopback TCP. `tcp`, the slowest, admits "
            "every path");

inline constexpr config::SettingSpec kEngineHost =
    config::string_setting("PDKV_ENGINE_HOST", "127.0.0.1")
        .shown_range("any host name or address")
        .described(
            "address the engine listens on and advertises in its endpoint `host:port`; set a "
            "routable address for peers on other hosts");

inline constexpr config::SettingSpec kEnginePort =
    config::int_setting("PDKV_ENGINE_PORT", 0, 0, 65535)
        .described("listening port of the engine; 0 = an ephemeral port chosen by the kernel");

inline constexpr config::SettingSpec kEngineConnectTimeoutMs =
    config::int_setting("PDKV_ENGINE_CONNECT_TIMEOUT_MS", 3000, 1, 600000)
        .described(
            "`open_session()` (connect + handshake of every stream) fails with Unavailable after "
            "this long");

inline constexpr config::SettingSpec kTcpStreams =
    config::int_setting("PDKV_TCP_STREAMS", 4, 1, 64)
        .described(
            "TCP connections per peer session; batches of at least 2 × `PDKV_TCP_MIN_SPLIT_BYTES` "
            "are split byte-evenly over them (default from the measurements in BENCHMARKS.md)");

inline constexpr config::SettingSpec kTcpIoTimeoutMs =
    config::int_setting("PDKV_TCP_IO_TIMEOUT_MS", 5000, 10, 3600000)
        .described(
            "a stream with outstanding work that moves no byte for this long fails its batches with"
            " DeadlineExceeded; a receiver drops a connection stalled mid-part after this long. "
            "Peer death (EOF/reset) is detected at once, independent of it");

inline constexpr config::SettingSpec kTcpSocketBufferBytes =
    config::int_setting("PDKV_TCP_SOCKET_BUFFER_BYTES", 0, 0, int64_t{1} << 30)
        .described(
            "SO_SNDBUF/SO_RCVBUF of engine sockets; 0 keeps the kernel's autotuning (setting a size"
            " turns it off)");

inline constexpr config::SettingSpec kTcpMinSplitBytes =
    config::int_setting("PDKV_TCP_MIN_SPLIT_BYTES", int64_t{1} << 20, 4096, int64_t{1} << 40)
        .described(
            "batches smaller than twice this travel on one stream (rotating); larger ones use up to"
            " `PDKV_TCP_STREAMS` shares of at least this size");

inline constexpr config::SettingSpec kTcpMaxPartEntries =
    config::int_setting("PDKV_TCP_MAX_PART_ENTRIES", int64_t{1} << 20, 1, int64_t{1} << 24)
        .described(
            "largest entry table per frame: a receiver rejects (and disconnects) a header declaring"
            " more before allocating; a sender cuts its parts to stay below. Must not exceed the "
            "peers' value");

inline constexpr config::SettingSpec kTcpStageMaxBytes =
    config::int_setting("PDKV_TCP_STAGE_MAX_BYTES", 0, 0, int64_t{1} << 20)
        .noted("(off)")
        .described(
            "blocks of at most this many bytes are gathered (sender) and scattered (receiver) with "
            "memcpy through a per-stream staging buffer (grown to need, at most 4 MiB) and cross "
            "the socket as one run instead of one iovec each. Off by default: into huge-page memory"
            " (numpy arrays, the engine bench) iovecs were as fast or faster even at 512 B; into a "
            "1 GiB pool without huge pages the kernel's per-iovec copy ran at 0.3-0.5 GB/s against "
            "1.7-3.2 GB/s staged, so set e.g. 4096 for such pools (BENCHMARKS.md, \"small "
            "blocks\"). Sender and receiver decide independently: the bytes on the wire are the "
            "same");

inline constexpr config::SettingSpec kTcpRecvStageMaxBytes =
    config::int_setting("PDKV_TCP_RECV_STAGE_MAX_BYTES", 4096, 0, int64_t{1} << 20)
        .described(
            "a receiver lands the pieces of strided runs (head-sliced pages: a TP 4 prefill rank's "
            "half of each token of a TP 2 decode rank's page) of at most this many bytes by "
            "reading them from the socket into a per-connection staging buffer 256 KiB at a time "
            "and copying each into place with streaming stores; larger pieces are read straight "
            "into place (`readv`). Read straight in, 512 B pieces cost the receiver 1.6 x the "
            "CPU per byte of 32 KiB blocks (each destination line is read before it is written); "
            "staged, 0.8 x (BENCHMARKS.md, \"Small pieces\"). Single blocks follow "
            "`PDKV_TCP_STAGE_MAX_BYTES`. 0 = always `readv`. The sender is unaffected: the bytes "
            "on the wire are the same");

inline constexpr config::SettingSpec kTcpInlineWriteBytes =
    config::int_setting("PDKV_TCP_INLINE_WRITE_BYTES", int64_t{256} << 10, 0, int64_t{16} << 20)
        .described(
            "a part of at most this many bytes (header and entry table included), submitted while "
            "its stream is writing nothing, is written by the submitting thread with one "
            "non-blocking `sendmsg` instead of waking the stream's thread: that hand-over cost a "
            "1-page request 60-100 us on 2 shared cores (BENCHMARKS.md, P5). What the socket does "
            "not take at once is left to the stream's thread. 0 = always hand over. Kept small "
            "because the submitting thread (the KV pipeline, or `KVSender.send`) does the copy "
            "itself");

inline constexpr config::SettingSpec kTcpMaxConnections =
    config::int_setting("PDKV_TCP_MAX_CONNECTIONS", 512, 1, 65536)
        .described(
            "most data connections an engine's receiver serves at once (one thread each: 128 peer "
            "sessions of 4 streams); more are closed at accept and logged (rate-limited), as is a "
            "connection whose thread cannot be started, instead of taking the process down. A new "
            "connection must send its first byte within `PDKV_TCP_IO_TIMEOUT_MS`. The shm and ucx "
            "backends apply the same cap to their lease channel (one connection per sender "
            "session), whose connections must finish each handshake step, the first frame included,"
            " within `PDKV_ENGINE_CONNECT_TIMEOUT_MS`");

inline constexpr config::SettingSpec kTcpDeviceSlabs =
    config::int_setting("PDKV_TCP_DEVICE_SLABS", 3, 1, 64)
        .described(
            "device memory over tcp: pinned host slabs per stream and device. A sender stages each "
            "part read from a device in one slab (device-to-host copies on the stream's own CUDA "
            "stream, then the send once its event fired); a receiver lands a part written into a "
            "device through the slabs in turn. Two or more let the next slab's copies overlap the "
            "socket work on the current one");

inline constexpr config::SettingSpec kTcpDeviceSlabBytes =
    config::int_setting("PDKV_TCP_DEVICE_SLAB_BYTES", int64_t{2} << 20, int64_t{64} << 10,
                        int64_t{1} << 30)
        .described(
            "size of each of those slabs; a part read from device memory carries at most this many "
            "payload bytes");

inline constexpr config::SettingSpec kCudaLibrary =
    config::string_setting("PDKV_CUDA_LIBRARY", "libcuda.so.1")
        .process_wide()
        .shown_range("a path")
        .described(
            "the CUDA driver library pdkv opens at run time for device memory (no CUDA toolkit is "
            "needed to build pdkv). Without a usable driver everything runs on host memory and "
            "registering device memory fails with the reason. CI points it at the fake driver "
            "(`libpdkv_fake_cuda.so`)");

inline constexpr config::SettingSpec kCudaNoBatchedCopies =
    config::bool_setting("PDKV_CUDA_NO_BATCHED_COPIES", false)
        .process_wide()
        .shown_default("unset")
        .shown_range("`1` to set")
        .described(
            "stage scattered pieces with one driver copy each even where the driver has batched "
            "copies (`cuMemcpyBatchAsync`, CUDA 12.8+): for comparing the two paths; leave unset");

}  // namespace pdkv::engine
