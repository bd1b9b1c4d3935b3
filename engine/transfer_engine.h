// TransferEngine: one-sided writes of local memory into a peer process's registered
// memory, the same API for every backend (tcp, shm, ucx: each plugs in via backend.h).
//
// Shape (as Mooncake's TransferEngine and NIXL's agent, smaller): register memory once,
// open a session to a peer endpoint, submit batches of WriteBlock {src, dst, length},
// poll or wait for each batch, release it. transfer_sync() keeps the reference's blocking
// call (Mooncake's batch_transfer_sync): 0 on success, negative on failure, an empty batch
// is 0.
//
// Semantics:
//  * A batch succeeds only after the peer wrote every byte into its memory and
//    acknowledged it. The peer accepts a block only if [dst, dst+length) lies in memory
//    it registered; otherwise the batch fails with OutOfRange naming the block (its index
//    in the submitted list, dst and length) and no byte of that block's part is written.
//  * A peer that dies fails its batches at once (EOF/reset); one that goes silent fails
//    them after TcpOptions::io_timeout_ms (DeadlineExceeded). Other peers are unaffected.
//  * A wait() that times out does NOT cancel the batch: the engine may still read the
//    source and the peer may still write the destination, so keep both buffers alive
//    (and registered) until a later poll()/wait() reports the batch finished.
//  * Contents of the destination of a failed batch are unspecified, but only inside
//    ranges the peer validated against its registered memory.
//
// Handles are values (index + generation): a stale or foreign SessionId/BatchId gives
// NotFound, never undefined behaviour.
//
// Thread safety: every method may be called concurrently from any thread, on the same or
// different sessions and batches. The engine owns its backend's threads (for TCP: an
// acceptor, one thread per accepted stream and one per outgoing stream); none of them
// ever runs user code.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/batch_note.h"
#include "engine/device/memory_kind.h"
#include "engine/device/ready_event.h"
#include "engine/engine_handles.h"
#include "engine/engine_options.h"
#include "engine/path/peer_path.h"
#include "engine/write_block.h"
#include "engine/write_grant.h"

namespace pdkv::engine {

class DeviceRegions;

// Who may touch a registered region: peers writing into it, or only this engine's own
// sends reading from it (a prefill's KV pool: peers must never write there).
enum class MemoryAccess : uint8_t { kPeerWritable, kLocalReadOnly };

// Ordering with a device stream: the batch's source bytes are valid once the work issued
// on `stream` (a CUDA stream of `device`) before the submit has run, e.g. the forward pass
// that wrote the KV cache. pdkv records an event of its own on that stream at submit (the
// submitting thread is bound to `device`'s primary context), so the caller may go on at
// once; device sources are then copied only after that event, waited for on the device
// (no host synchronisation); a batch that also reads host memory waits for it on the
// submitting thread first. Without it the contract is that the caller has synchronised:
// the sources are final when submit is called.
//
// `marks`: points recorded earlier with mark_sources_ready(), for a caller that learns
// where its sources became valid long before it submits them (a KV chunk is marked when
// the model hands it over and sent once the decode's pages are known). They are waited
// for like the stream's point.
struct SourceReady {
  void* stream = nullptr;  // a CUstream; null: none
  int device = -1;
  ReadyEvents marks;
};

class TransferEngine {
 public:
  // Creates the backend named in options and starts listening.
  // InvalidArgument for a bad option or unknown backend; FailedPrecondition for a backend
  // not built in; Unavailable if the address cannot be bound.
  static Result<std::unique_ptr<TransferEngine>> create(const EngineOptions& options);

  // Closes every session (their pending batches fail with Aborted) and stops all threads.
  // REQUIRES: no other thread is inside a method of this engine.
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // "host:port" peers pass to open_session(): the path channel of an automatic engine
  // (EngineOptions::backend "auto"), else the backend's own.
  const std::string& endpoint() const;
  // "auto", or the fixed backend's name.
  std::string_view backend_name() const;

  // kPeerWritable: makes [addr, addr+length) writable by peers (under grants when
  // options.require_write_grants). kLocalReadOnly: a source of this engine's sends only,
  // never writable by a peer. InvalidArgument for length 0, an overflowing or unmapped
  // range; FailedPrecondition if it overlaps a registered region.
  //
  // `kind` says what the memory is (memory_kind.h). kAuto asks the device driver, where
  // the process has one (device_driver.h), and takes host memory otherwise. kCuda needs
  // the range to be one CUDA device allocation (on `device`, unless -1), not managed
  // memory, and a backend that moves device memory on this side (BackendCapabilities:
  // tcp stages it; shm refuses it); each gives InvalidArgument or FailedPrecondition
  // with the reason. Device memory is never touched by the CPU: device sources must be
  // registered (kLocalReadOnly is enough) before a batch reads them.
  Status register_memory(uint64_t addr, uint64_t length,
                         MemoryAccess access = MemoryAccess::kPeerWritable,
                         MemoryKind kind = MemoryKind::kAuto, int device = -1);
  // Which registered ranges are device memory (for callers that read registered memory
  // themselves, such as the KV checksum).
  const DeviceRegions& device_regions() const;
  // Removes the region starting at addr (NotFound otherwise). Writes that already passed
  // validation into it finish first (bounded by the I/O timeout); later ones are rejected.
  Status unregister_memory(uint64_t addr);

  // Opens `grant`'s items (inside peer-writable memory) to writes naming `grant_id`
  // (random, non-zero; write_grant.h). InvalidArgument for id 0, a malformed grant or one
  // reaching outside peer-writable memory; FailedPrecondition if the id is live.
  Status grant_writes(uint64_t grant_id, WriteGrant grant);
  // Closes the grant at once: later writes naming it are refused. `on_drained` runs
  // once every write admitted under it has landed: on this thread before return if none
  // is in flight, else on an engine thread (short, non-blocking). NotFound if not live.
  // GrantEnd::kCompleted (the room succeeded): a later write naming the grant is refused
  // with AlreadyCompleted instead of OutOfRange, for a while (memory_registry.h).
  Status revoke_writes(uint64_t grant_id, std::function<void()> on_drained = {},
                       GrantEnd end = GrantEnd::kWithdrawn);

  // Connects to a peer engine. Unavailable with the cause if it does not answer within
  // options.connect_timeout_ms. Sessions are independent; several to one peer are fine.
  // An automatic engine picks the fastest path both sides can take (path_router.h) and
  // logs it once per peer; FailedPrecondition when it is below options.require_path.
  Result<SessionId> open_session(const std::string& peer_endpoint);
  // Fails the session's pending batches with Aborted and frees it. NotFound if stale.
  Status close_session(SessionId session);

  // Starts writing `blocks` to the session's peer and returns at once. The span may die
  // on return; the source memory must stay alive and unchanged until the batch finishes.
  // Zero-length blocks are skipped; an empty list gives a batch that already succeeded.
  // Errors (nothing submitted): NotFound (stale session), InvalidArgument (a block whose
  // src+length or dst+length overflows), Unavailable (the session's connection broke).
  Result<BatchId> submit(SessionId session, std::span<const WriteBlock> blocks);
  // Same as submit(), but the result goes to `on_done` instead of a BatchId, so nothing
  // waits for it (pipelines keep many batches in flight and advance on completions).
  // `on_done` runs exactly once if (and only if) this returns OK, on an engine thread or
  // on the caller's before submit_async returns (an empty list); it must be short, must not
  // block, and must not call this engine's blocking methods (transfer, wait, close_session).
  //
  // `note` (optional, at most kMaxNoteBytes, copied): bytes the peer engine hands to its
  // note handler after every byte of the batch landed there and before it acknowledges
  // the batch, so on_done(OK) implies the peer handled the note (batch_note.h). Needs a
  // non-empty batch (InvalidArgument) and a backend that carries notes
  // (FailedPrecondition: see carries_notes()).
  //
  // `ready` (optional): when the sources become valid on a device (SourceReady).
  Status submit_async(SessionId session, std::span<const WriteBlock> blocks,
                      std::function<void(Status)> on_done, std::span<const uint8_t> note = {},
                      SourceReady ready = {});
  // Records, now, the point of `stream` (a CUstream of `device`) after which sources
  // written by work already issued on it are valid; hand it to a later submit in
  // SourceReady::marks. The calling thread gets its own current context back.
  // FailedPrecondition without a CUDA driver; the driver's error if recording fails.
  Result<std::shared_ptr<const ReadyEvent>> mark_sources_ready(void* stream, int device);
  // Whether some path of this engine carries batch notes (tcp does; shm and ucx do not);
  // the one-argument form says it for the path `session` took (false for a stale id): a
  // note submitted on a session whose path does not carry notes is FailedPrecondition.
  bool carries_notes() const;
  bool carries_notes(SessionId session) const;
  // Every peer's path and why no faster one was possible: the sessions this engine opened
  // and the peers that told it how they write into it (path_router.h).
  std::vector<PeerPath> peer_paths() const;
  // Receives the notes of batches peers wrote into this engine (batch_note.h); replaces
  // the previous handler, an empty one drops notes (the default), and returns once no
  // call of the previous handler is running (so its owner may then go away; never call
  // it from inside a handler). The handler runs on an engine
  // receiving thread, one note at a time per connection; it must be short, must not block
  // and must not call this engine's blocking methods (transfer, wait, close_session); it
  // may call grant_writes / revoke_writes. Notes are peer input: validate them.
  using NoteHandler = std::function<void(std::span<const uint8_t> note)>;
  void set_note_handler(NoteHandler handler);
  // Current state. NotFound for a stale or released id.
  Result<BatchStatus> poll(BatchId batch) const;
  // Blocks until the batch finishes or `timeout` passes; on timeout the state is kPending
  // (see above: nothing is cancelled). NotFound for a stale or released id.
  Result<BatchStatus> wait(BatchId batch, std::chrono::milliseconds timeout);
  // Frees the id. A batch released while pending keeps running; its result is dropped.
  Status release(BatchId batch);

  // submit + wait until finished + release. Returns the batch's error, if any.
  Status transfer(SessionId session, std::span<const WriteBlock> blocks, SourceReady ready = {});
  // The reference's call: 0 on success, a negative value on failure (logged with cause).
  int transfer_sync(SessionId session, std::span<const WriteBlock> blocks);
  // Same, by endpoint: keeps one cached session per endpoint, reopened if it broke.
  int transfer_sync(const std::string& peer_endpoint, std::span<const WriteBlock> blocks);

  class Impl;

 private:
  explicit TransferEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pdkv::engine
