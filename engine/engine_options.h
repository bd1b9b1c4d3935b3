// EngineOptions: every knob of the transfer engine, with its default visible here.
//
// `EngineOptions::from_env()` reads the PDKV_ENGINE_* and PDKV_TCP_* variables once
// (common/config.h: range-checked, logged, documented in docs/CONFIG.md); tests and
// benchmarks build the struct directly instead. Backend-specific settings live in their
// own structs rather than in a union, so adding a backend never reshapes an existing
// field: TcpOptions here; ShmOptions and UcxOptions beside their backends, read through
// `settings` (PDKV_TCP_MAX_CONNECTIONS also caps their lease-channel connections).
//
// Thread safety: a plain value type.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/cluster_key.h"
#include "common/config.h"
#include "common/status.h"
#include "engine/engine_settings.h"

namespace pdkv::engine {

struct TcpOptions {
  // Parallel TCP connections per peer session; a batch's bytes are spread over them.
  // Default chosen by measurement on loopback (BENCHMARKS.md, "Engine: TCP backend").
  int streams = static_cast<int>(kTcpStreams.int_default);
  // A stream with outstanding work that makes no progress (no byte sent or received) for
  // this long fails its batches with DeadlineExceeded and is closed. Peer death (EOF/RST)
  // is detected immediately, independent of this.
  int io_timeout_ms = static_cast<int>(kTcpIoTimeoutMs.int_default);
  // SO_SNDBUF/SO_RCVBUF; 0 leaves the kernel's autotuning on (setting them disables it).
  int socket_buffer_bytes = static_cast<int>(kTcpSocketBufferBytes.int_default);
  // Batches below this many bytes travel on one stream (splitting them costs more
  // syscalls than it gains); larger ones are split so every stream carries a share.
  uint64_t min_split_bytes = static_cast<uint64_t>(kTcpMinSplitBytes.int_default);
  // Largest entry table per frame. A receiver rejects larger declared counts before it
  // allocates anything; a sender splits its parts to stay below.
  uint32_t max_part_entries = static_cast<uint32_t>(kTcpMaxPartEntries.int_default);
  // Entries of at most this many bytes are gathered (sender) and scattered (receiver)
  // with memcpy through a staging buffer and cross the socket as one contiguous run,
  // instead of one iovec each. 0 (the default) = never. Worth turning on for pools
  // without huge pages: there the kernel's per-iovec copy into a 1 GiB pool measured 3-10x
  // slower than memcpy, while into huge-page memory (numpy arrays, the engine bench)
  // iovecs were as fast or faster even at 512 B (BENCHMARKS.md, "small blocks"). Sender
  // and receiver decide independently (the bytes on the wire are the same either way).
  uint64_t stage_max_bytes = static_cast<uint64_t>(kTcpStageMaxBytes.int_default);
  // A receiver lands the pieces of strided runs of at most this many bytes through its
  // staging buffer, copied into place with streaming stores (scatter_copy.h); larger ones,
  // and single blocks (stage_max_bytes), with readv straight in. 0 = readv only. The
  // receiver alone decides: the bytes on the wire are the same.
  uint64_t recv_stage_max_bytes = static_cast<uint64_t>(kTcpRecvStageMaxBytes.int_default);
  // Largest run staged at once (the staging buffer of each stream).
  uint64_t stage_buffer_bytes = 4 << 20;
  // A part of at most this many bytes (header and table included), enqueued while its
  // stream writes nothing, is written by the submitting thread itself with one
  // non-blocking sendmsg() instead of waking the stream's thread (tcp_sender.h). 0 = never.
  // Small: a large part would hold the caller (the KV pipeline) for its whole copy; a
  // 1-page request (128 KiB) is what it is for.
  uint64_t inline_write_max_bytes = static_cast<uint64_t>(kTcpInlineWriteBytes.int_default);
  // Most connections a receiver serves at once (a thread each); more are closed at accept.
  // 512 = 128 peer sessions of 4 streams.
  int max_connections = static_cast<int>(kTcpMaxConnections.int_default);
  // Device memory (staged through pinned host memory): each stream stages parts read
  // from a device, and lands parts written into one, through this many pinned slabs of
  // this many bytes per device it touches; a part read from a device carries at most one
  // slab. Two slabs or more let the next part's device copies overlap the socket work on
  // the current one.
  int device_slabs = static_cast<int>(kTcpDeviceSlabs.int_default);
  uint64_t device_slab_bytes = static_cast<uint64_t>(kTcpDeviceSlabBytes.int_default);
};

struct EngineOptions {
  // "auto": every backend built in, the fastest path chosen per peer (engine/path/).
  // "tcp", "shm" (same host), "ucx" (create() says so when UCX is not built in): that
  // backend alone, for every peer. The environment's default is auto (kEngineBackend);
  // code that builds this struct directly (tests, benchmarks) names its transport, tcp
  // unless it says otherwise.
  std::string backend = "tcp";
  // Refuse a peer rather than reach it below this path (path_kind.h); empty: any path.
  std::string require_path;
  // Address the engine listens on and advertises in endpoint(). Peers on other hosts
  // need a routable address here, not the loopback default.
  std::string host = std::string(kEngineHost.string_default);
  // 0 = an ephemeral port chosen by the kernel (see endpoint()).
  int port = static_cast<int>(kEnginePort.int_default);
  // open_session() gives up with Unavailable after this long.
  int connect_timeout_ms = static_cast<int>(kEngineConnectTimeoutMs.int_default);
  TcpOptions tcp;
  // The cluster secret's keys (common/cluster_key.h). Set: every session starts with a
  // mutual challenge-response handshake and a peer that fails it neither receives nor
  // writes a byte. Null: unauthenticated (warned once at create()).
  std::shared_ptr<const ClusterKey> cluster_key;
  // Peers write only under a live write grant (write_grant.h) that covers the bytes:
  // the KV managers turn this on (each room grants its own pages), so a peer writes only
  // into pages granted to its room and a rank that only sends accepts no write at all.
  // Off, any write into registered memory is accepted (the engine as a plain copier:
  // benchmarks, tests).
  bool require_write_grants = false;
  // The explicit settings these options were read with (from()): a backend reads its own
  // options (ShmOptions, UcxOptions) through them, so code-given values reach it too.
  config::Settings settings;

  // Reads PDKV_ENGINE_BACKEND, PDKV_ENGINE_REQUIRE_PATH, PDKV_ENGINE_HOST, PDKV_ENGINE_PORT,
  // PDKV_ENGINE_CONNECT_TIMEOUT_MS, PDKV_TCP_* and PDKV_SECRET_FILE: each from `settings`
  // if set there, else the environment, else the default above (common/config.h).
  // InvalidArgument naming the variable if one is malformed or out of range.
  static Result<EngineOptions> from(const config::Settings& settings);
  // The same with the cluster key already read (null: none): a KV manager reads the secret
  // file once and gives the one key to its engine, control channel and route directory.
  static Result<EngineOptions> from(const config::Settings& settings,
                                    std::shared_ptr<const ClusterKey> cluster_key);
  static Result<EngineOptions> from_env() { return from(config::Settings()); }
};

}  // namespace pdkv::engine
