// Backend: the interface a transport implements to plug into the TransferEngine.
//
// Shaped after NIXL's backend engine (capabilities + connect/post/complete) but smaller.
// The engine core owns memory registration, sessions, batch ids and waiting; a backend
// only moves bytes: it listens, connects to peers, posts a list of writes to one peer and
// reports, exactly once per post, whether the peer applied all of them.
//
// Contract every backend keeps:
//  * Completion means applied: OK only after the peer wrote every byte into its memory
//    and acknowledged it (never "left the local socket buffer").
//  * The receiving side accepts a write only if [dst, dst+len) lies in memory registered
//    in its MemoryRegistry (checked in software, or by hardware keys for RDMA). A part
//    with one bad entry is rejected whole, before any of its bytes are written, with
//    OutOfRange naming the entry (index in the posted list), its dst and length.
//  * A dead or silent peer fails its posts within a bounded time (the backend's I/O
//    timeout); the backend keeps serving every other peer.
//
// Threads: a backend owns its threads and names them in its own header. post() may be
// called from many threads at once, for the same or different peers. The sink may be
// called from any backend thread, and even before post() returns; it must not block.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/batch_note.h"
#include "engine/device/memory_kind.h"
#include "engine/device/ready_event.h"
#include "engine/engine_options.h"
#include "engine/write_block.h"

namespace pdkv::engine {

class DeviceRegions;
class MemoryRegistry;

struct BackendCapabilities {
  std::string_view name;               // "tcp", "shm", "ucx"
  bool cross_host = false;             // reaches peers on other machines
  bool software_bounds_check = false;  // receiver checks dst against its MemoryRegistry
  bool wants_memory_hooks = false;     // needs on_register/on_unregister (e.g. rkeys)
  // Runs the session handshake (session_auth.h) with EngineOptions::cluster_key on every
  // session; the engine refuses to start a backend that does not with a secret, since it
  // would look authenticated and not be.
  bool authenticates_sessions = false;
  // Implements post_with_note() and delivers received notes to BackendContext::notes
  // (batch_note.h).
  bool carries_notes = false;
  // What the backend does with device memory (memory_kind.h) it reads from (source) and
  // writes into (destination). The engine refuses to register device memory a backend
  // cannot move, naming the backend, the kind and the fix.
  DeviceSupport device_source = DeviceSupport::kNone;
  DeviceSupport device_destination = DeviceSupport::kNone;
  // Implements post_after(): device sources are read only after a device event, waited
  // for on the device (the engine waits on the host for backends without it).
  bool orders_device_sources = false;
};

// Where a backend reports completions. Implemented by the engine core.
class CompletionSink {
 public:
  // Called exactly once per successful post(), with the token given to post().
  virtual void on_complete(uint64_t token, Status status) = 0;

 protected:
  ~CompletionSink() = default;
};

// Where a receiving backend hands the notes of parts it applied (batch_note.h).
// Implemented by the engine core.
class NoteSink {
 public:
  // On a backend thread, after every byte of the note's batch landed and before the
  // batch is acknowledged; `note` is 1..kMaxNoteBytes bytes, valid during the call.
  virtual void on_note(std::span<const uint8_t> note) = 0;

 protected:
  ~NoteSink() = default;
};

// What the engine lends a backend; every pointer outlives the backend.
struct BackendContext {
  const EngineOptions* options = nullptr;
  MemoryRegistry* registry = nullptr;  // this process's registered memory (receiver side)
  CompletionSink* sink = nullptr;
  NoteSink* notes = nullptr;
  // Which registered ranges (read-only sources and peer-writable destinations alike) are
  // device memory, and on which device (device_regions.h).
  const DeviceRegions* device_regions = nullptr;
};

// A connection to one peer engine. Destroying it completes every post still in flight on
// it with Aborted before the destructor returns.
class BackendPeer {
 public:
  virtual ~BackendPeer() = default;
  virtual const std::string& endpoint() const = 0;
  // OK while usable; otherwise the error that broke it (posts then fail fast with it).
  virtual Status health() const = 0;
};

class Backend {
 public:
  // Stops every thread; every post still in flight completes (Aborted) before return.
  // The engine destroys all BackendPeers before the Backend.
  virtual ~Backend() = default;

  virtual BackendCapabilities capabilities() const = 0;

  // Binds options.host:options.port and starts accepting; returns the endpoint
  // "host:port" peers connect to. Called once, before anything else.
  virtual Result<std::string> listen() = 0;

  // Hooks run after the engine's registry accepted (before it drops) a region. A backend
  // without capabilities().wants_memory_hooks returns OK.
  virtual Status on_register_memory(uint64_t addr, uint64_t length) = 0;
  virtual Status on_unregister_memory(uint64_t addr, uint64_t length) = 0;

  // Connects to a peer engine's endpoint within options.connect_timeout_ms.
  // Unavailable (naming the endpoint and the cause) if nothing answers.
  virtual Result<std::unique_ptr<BackendPeer>> connect(const std::string& endpoint) = 0;

  // Posts `blocks` (non-empty, every length > 0, each src+length and dst+length without
  // overflow: the engine checks) to `peer`. The backend copies what it needs; `blocks`
  // may die when post() returns, the memory it points to may not until completion.
  // An error return means nothing was posted and the sink will not be called for
  // `token`; OK means the sink will be called exactly once for it.
  virtual Status post(BackendPeer& peer, std::span<const WriteBlock> blocks, uint64_t token) = 0;

  // post() plus a note (1..kMaxNoteBytes bytes, copied) that the peer's NoteSink gets
  // after every byte of `blocks` landed there and before the post completes here. Only
  // backends with capabilities().carries_notes implement it.
  virtual Status post_with_note(BackendPeer& peer, std::span<const WriteBlock> blocks,
                                uint64_t token, std::span<const uint8_t> note) {
    (void)peer, (void)blocks, (void)token, (void)note;
    return failed_precondition("this backend does not carry batch notes");
  }

  // post_with_note() (an empty note: none) whose device-memory sources are read only
  // after every event in `ready` completed, waited for on the device. Only backends with
  // capabilities().orders_device_sources implement it; the engine calls it only for
  // batches whose every source is device memory.
  virtual Status post_after(BackendPeer& peer, std::span<const WriteBlock> blocks, uint64_t token,
                            std::span<const uint8_t> note,
                            ReadyEvents ready) {
    (void)peer, (void)blocks, (void)token, (void)note, (void)ready;
    return failed_precondition("this backend does not order sends after device events");
  }
};

// Creates the backend named by ctx.options->backend. InvalidArgument for an unknown name;
// FailedPrecondition for a known backend not built into this binary.
Result<std::unique_ptr<Backend>> make_backend(const BackendContext& ctx);

// Reads the options of every backend built into this binary (shm, ucx) through
// `settings`, so a malformed value of any of them is reported at once (pdkv.Config
// checks every field this way), not when that backend is first created.
Status check_backend_settings(const config::Settings& settings);

}  // namespace pdkv::engine
