// TransferEngine core: sessions, batch ids and waiting; bytes move in the backend.
#include "engine/transfer_engine.h"

#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/mutex.h"
#include "engine/backend.h"
#include "engine/batch_table.h"
#include "engine/device/device_health.h"
#include "engine/device/device_regions.h"
#include "engine/device/ready_event.h"
#include "engine/device/registration_check.h"
#include "engine/memory_registry.h"

namespace pdkv::engine {

class TransferEngine::Impl final : public CompletionSink, public NoteSink {
 public:
  explicit Impl(const EngineOptions& options) : options_(options) {}

  ~Impl() {
    // Peers first: their destructors complete in-flight batches into batches_.
    std::vector<std::shared_ptr<BackendPeer>> peers;
    {
      MutexLock lock(sessions_mu_);
      for (auto& s : sessions_) {
        if (s.peer) peers.push_back(std::move(s.peer));
      }
      sessions_.clear();
    }
    peers.clear();
    backend_.reset();
  }

  Status start() {
    registry_.set_require_grants(options_.require_write_grants);
    BackendContext ctx{&options_, &registry_, this, this, &device_regions_};
    PDKV_ASSIGN_OR_RETURN(backend_, make_backend(ctx));
    // Checked before listen(): a backend that cannot run the session handshake would look
    // authenticated with a secret and not be.
    if (options_.cluster_key && !backend_->capabilities().authenticates_sessions) {
      return failed_precondition("backend '" + options_.backend +
                                 "' does not authenticate its sessions; with a cluster "
                                 "secret (PDKV_SECRET_FILE) use tcp, shm or ucx");
    }
    PDKV_ASSIGN_OR_RETURN(endpoint_, backend_->listen());
    PDKV_LOG_INFO("transfer engine: backend {} listening on {}", backend_->capabilities().name,
                  endpoint_);
    return Status();
  }

  void on_complete(uint64_t token, Status status) override {
    batches_.complete(token, std::move(status));
  }

  void on_note(std::span<const uint8_t> note) override {
    std::shared_ptr<NoteSlot> slot;
    {
      MutexLock lock(note_mu_);
      if (!note_slot_) return;
      slot = note_slot_;
      ++slot->running;
    }
    slot->handler(note);
    MutexLock lock(note_mu_);
    if (--slot->running == 0) note_idle_.notify_all();
  }

  void set_note_handler(NoteHandler handler) {
    std::shared_ptr<NoteSlot> next;
    if (handler) next = std::make_shared<NoteSlot>(NoteSlot{std::move(handler), 0});
    MutexLock lock(note_mu_);
    std::shared_ptr<NoteSlot> previous = std::exchange(note_slot_, std::move(next));
    // Calls already in the previous handler finish first: its owner may go away next.
    // They are short by contract; the slice only keeps each wait bounded.
    while (previous && previous->running > 0) {
      note_idle_.wait_for(note_mu_, std::chrono::seconds(1),
                          [&]() PDKV_REQUIRES(note_mu_) { return previous->running == 0; });
    }
  }

  bool carries_notes() const { return backend_->capabilities().carries_notes; }

  Status register_memory(uint64_t addr, uint64_t length, MemoryAccess access, MemoryKind kind,
                         int device) {
    // A range peers write into must be writable: a read-only mapping would be accepted and
    // the first byte landed in it would kill this process.
    const HostAccess host_access =
        access == MemoryAccess::kPeerWritable ? HostAccess::kReadWrite : HostAccess::kRead;
    PDKV_ASSIGN_OR_RETURN(PointerInfo info,
                          check_registration(addr, length, kind, device, host_access));
    if (info.kind == MemoryKind::kCuda) {
      PDKV_RETURN_IF_ERROR(check_device_support(access, info.device));
      PDKV_RETURN_IF_ERROR(device_regions_.add(addr, length, info.device));
    }
    Status added = register_region(addr, length, access);
    if (!added.ok() && info.kind == MemoryKind::kCuda) device_regions_.remove(addr);
    return added;
  }

  // Whether the backend moves device memory on the side `access` puts this region on.
  Status check_device_support(MemoryAccess access, int device) const {
    const BackendCapabilities caps = backend_->capabilities();
    const bool destination = access == MemoryAccess::kPeerWritable;
    if ((destination ? caps.device_destination : caps.device_source) != DeviceSupport::kNone) {
      return Status();
    }
    std::string fix = "use the tcp backend, which stages device memory through pinned host memory";
    if (caps.name == "shm") {
      fix = "process_vm_writev moves host memory only; " + fix +
            " (it works over loopback between "
            "processes of one host)";
    } else if (caps.name == "ucx") {
      fix =
          "this UCX reports no CUDA memory support (ucp_context_query); build UCX with CUDA, "
          "or " +
          fix;
    }
    return failed_precondition(
        fmt::format("register_memory: backend '{}' cannot {} CUDA device memory (device {}): {}",
                    caps.name, destination ? "write into" : "read from", device, fix));
  }

  Status register_region(uint64_t addr, uint64_t length, MemoryAccess access) {
    if (access == MemoryAccess::kLocalReadOnly) {
      // Sends read local memory directly (TCP, CMA, UCX puts from host memory): nothing
      // to hand a backend, and nothing a peer may write. Tracked so that overlaps and
      // unregister_memory() behave as for writable regions.
      if (overlaps(registry_, addr, length)) {
        return failed_precondition(
            fmt::format("register_memory: {:#x}+{} overlaps a peer-writable region", addr, length));
      }
      return read_only_.add(addr, length);
    }
    if (overlaps(read_only_, addr, length)) {
      return failed_precondition(
          fmt::format("register_memory: {:#x}+{} overlaps a read-only region", addr, length));
    }
    PDKV_RETURN_IF_ERROR(registry_.add(addr, length));
    Status hook = backend_->on_register_memory(addr, length);
    if (!hook.ok()) {
      (void)registry_.remove(addr);
      return hook;
    }
    return Status();
  }

  static bool overlaps(const MemoryRegistry& registry, uint64_t addr, uint64_t length) {
    for (const Region& r : registry.regions()) {
      if (r.addr < addr + length && addr < r.addr + r.length) return true;
    }
    return false;
  }

  Status grant_writes(uint64_t grant_id, WriteGrant grant) {
    return registry_.add_grant(grant_id, std::move(grant));
  }
  Status revoke_writes(uint64_t grant_id, std::function<void()> on_drained, GrantEnd end) {
    return registry_.revoke_grant(grant_id, std::move(on_drained), end);
  }

  Status unregister_memory(uint64_t addr) {
    if (read_only_.remove(addr).ok()) {
      device_regions_.remove(addr);
      return Status();
    }
    uint64_t length = 0;
    PDKV_RETURN_IF_ERROR(registry_.remove(addr, &length));
    // After remove(): no write admitted into it is still landing.
    device_regions_.remove(addr);
    return backend_->on_unregister_memory(addr, length);
  }

  const DeviceRegions& device_regions() const { return device_regions_; }

  Result<SessionId> open_session(const std::string& endpoint) {
    PDKV_ASSIGN_OR_RETURN(std::unique_ptr<BackendPeer> peer, backend_->connect(endpoint));
    MutexLock lock(sessions_mu_);
    uint32_t index;
    if (!free_sessions_.empty()) {
      index = free_sessions_.back();
      free_sessions_.pop_back();
    } else {
      index = static_cast<uint32_t>(sessions_.size());
      sessions_.emplace_back();
    }
    SessionSlot& slot = sessions_[index];
    slot.peer = std::move(peer);
    return SessionId{index, slot.generation};
  }

  Status close_session(SessionId id) {
    std::shared_ptr<BackendPeer> peer;
    {
      MutexLock lock(sessions_mu_);
      SessionSlot* slot = find_session(id);
      if (slot == nullptr) return not_found("unknown or closed session");
      peer = std::move(slot->peer);
      if (++slot->generation == 0) slot->generation = 1;
      free_sessions_.push_back(id.index);
    }
    peer.reset();  // may join backend threads: outside the lock
    return Status();
  }

  Result<BatchId> submit(SessionId id, std::span<const WriteBlock> blocks) {
    return submit_with(id, blocks, nullptr);
  }

  Status submit_async(SessionId id, std::span<const WriteBlock> blocks,
                      std::function<void(Status)> on_done, std::span<const uint8_t> note,
                      SourceReady ready) {
    if (!on_done) return invalid_argument("submit_async needs a completion callback");
    if (!note.empty() && !carries_notes()) {
      return failed_precondition("backend '" + options_.backend + "' does not carry batch notes");
    }
    if (note.size() > kMaxNoteBytes) {
      return invalid_argument("a batch note has at most " + std::to_string(kMaxNoteBytes) +
                              " bytes, not " + std::to_string(note.size()));
    }
    return submit_with(id, blocks, std::move(on_done), note, ready).status();
  }

  std::shared_ptr<ReadyEventPool> ready_pool(DeviceDriver* driver) {
    MutexLock lock(ready_mu_);
    if (!ready_pool_) ready_pool_ = std::make_shared<ReadyEventPool>(driver);
    return ready_pool_;
  }

  Result<std::shared_ptr<const ReadyEvent>> mark_sources_ready(void* stream, int device) {
    if (stream == nullptr) return invalid_argument("marking sources ready needs a device stream");
    DeviceDriver* driver = device_driver();
    if (driver == nullptr) {
      return failed_precondition(
          "sources are marked on a device stream, but this process has "
          "no CUDA driver: " +
          device_driver_absent_reason());
    }
    return ready_pool(driver)->record_on(stream, device);
  }

  // The events after which the batch may read its sources on the device; empty when none
  // is needed (nothing named, or the submitting thread already waited for them because
  // the batch also reads host memory, which the CPU sends, or the backend cannot order on
  // the device).
  Result<ReadyEvents> source_ready_events(std::span<const WriteBlock> blocks, SourceReady ready) {
    ReadyEvents events = std::move(ready.marks);
    if (ready.stream != nullptr) {
      PDKV_ASSIGN_OR_RETURN(std::shared_ptr<const ReadyEvent> event,
                            mark_sources_ready(ready.stream, ready.device));
      events.push_back(std::move(event));
    }
    if (events.empty()) return events;
    bool device_only = backend_->capabilities().orders_device_sources;
    for (size_t i = 0; i < blocks.size() && device_only; ++i) {
      if (blocks[i].length == 0) continue;
      device_only = device_regions_.device_of(blocks[i].src_addr, blocks[i].length) >= 0;
    }
    if (device_only) return events;
    // The CPU (or a backend without device ordering) reads these sources: wait here, for
    // the points not already passed (a mark made long before its submit usually is).
    for (const auto& event : events) PDKV_RETURN_IF_ERROR(event->wait_on_host());
    return ReadyEvents();
  }

  // A null on_done gives a batch to poll/wait; otherwise the callback gets the result.
  Result<BatchId> submit_with(SessionId id, std::span<const WriteBlock> blocks,
                              std::function<void(Status)> on_done,
                              std::span<const uint8_t> note = {}, SourceReady ready = {}) {
    std::shared_ptr<BackendPeer> peer;
    {
      MutexLock lock(sessions_mu_);
      SessionSlot* slot = find_session(id);
      if (slot == nullptr) return not_found("unknown or closed session");
      peer = slot->peer;
    }
    bool any_bytes = false;
    constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const WriteBlock& b = blocks[i];
      if (b.length == 0) continue;
      if (b.src_addr > kMax - b.length || b.dst_addr > kMax - b.length) {
        return invalid_argument(fmt::format("block {} (src {:#x}, dst {:#x}, length {}) overflows",
                                            i, b.src_addr, b.dst_addr, b.length));
      }
      any_bytes = true;
    }
    // A note needs a part to ride on: nothing to write would deliver it nowhere.
    if (!any_bytes && !note.empty()) return invalid_argument("a batch note needs bytes to write");
    // After a sticky device error no copy can read device memory again: a batch that needs
    // one fails here, with that error, instead of staging into a dead context.
    if (!device_healthy()) {
      for (const WriteBlock& b : blocks) {
        if (b.length > 0 &&
            device_regions_.device_of(b.src_addr, b.length) != DeviceRegions::kHost) {
          return device_fault().with_context("the batch reads device memory");
        }
      }
    }
    PDKV_ASSIGN_OR_RETURN(ReadyEvents ready_events, source_ready_events(blocks, std::move(ready)));
    if (!any_bytes && on_done) {
      on_done(Status());
      return BatchId{};
    }
    const bool async = static_cast<bool>(on_done);
    const BatchId batch = batches_.allocate(std::move(on_done));
    if (!any_bytes) {
      batches_.complete(BatchTable::token_of(batch), Status());
      return batch;
    }
    const uint64_t token = BatchTable::token_of(batch);
    Status posted = !ready_events.empty()
                        ? backend_->post_after(*peer, blocks, token, note, std::move(ready_events))
                    : note.empty() ? backend_->post(*peer, blocks, token)
                                   : backend_->post_with_note(*peer, blocks, token, note);
    if (!posted.ok()) {
      // Nothing was posted, so no completion will come: free the slot without reporting
      // (an error return means the callback is never called).
      batches_.abandon(batch);
      return posted;
    }
    if (async) return BatchId{};
    return batch;
  }

  Result<BatchStatus> poll(BatchId id) const { return batches_.poll(id); }

  Result<BatchStatus> wait(BatchId id, std::chrono::milliseconds timeout) {
    return batches_.wait_until(id, std::chrono::steady_clock::now() + timeout);
  }

  Status release(BatchId id) { return batches_.release(id); }

  Status transfer(SessionId id, std::span<const WriteBlock> blocks, SourceReady ready = {}) {
    PDKV_ASSIGN_OR_RETURN(BatchId batch, submit_with(id, blocks, nullptr, {}, ready));
    // Backends bound every batch by their I/O timeout, so this loop ends; the slice only
    // keeps each wait bounded (CondVar has no unbounded wait on purpose).
    while (true) {
      PDKV_ASSIGN_OR_RETURN(BatchStatus st, wait(batch, std::chrono::seconds(1)));
      if (st.state == BatchState::kPending) continue;
      (void)release(batch);
      return st.error;
    }
  }

  int transfer_sync(SessionId id, std::span<const WriteBlock> blocks) {
    Status st = transfer(id, blocks);
    if (st.ok()) return 0;
    PDKV_LOG_ERROR("transfer_sync of {} blocks failed: {}", blocks.size(), st.to_string());
    return -1;
  }

  int transfer_sync(const std::string& endpoint, std::span<const WriteBlock> blocks) {
    if (blocks.empty()) return 0;
    Result<SessionId> session = cached_session(endpoint);
    if (!session.ok()) {
      PDKV_LOG_ERROR("transfer_sync to {}: {}", endpoint, session.status().to_string());
      return -1;
    }
    return transfer_sync(*session, blocks);
  }

  const std::string& endpoint() const { return endpoint_; }
  std::string_view backend_name() const { return backend_->capabilities().name; }

 private:
  struct SessionSlot {
    uint32_t generation = 1;
    // Shared: submit() posts on it outside sessions_mu_ while close_session() may drop it.
    std::shared_ptr<BackendPeer> peer;
  };

  SessionSlot* find_session(SessionId id) PDKV_REQUIRES(sessions_mu_) {
    if (id.generation == 0 || id.index >= sessions_.size()) return nullptr;
    SessionSlot& s = sessions_[id.index];
    if (!s.peer || s.generation != id.generation) return nullptr;
    return &s;
  }

  Result<SessionId> cached_session(const std::string& endpoint) {
    {
      MutexLock lock(sessions_mu_);
      auto it = by_endpoint_.find(endpoint);
      if (it != by_endpoint_.end()) {
        SessionSlot* slot = find_session(it->second);
        if (slot != nullptr && slot->peer->health().ok()) return it->second;
      }
    }
    // Two threads may both open one here; the loser's session is closed, which is cheap.
    PDKV_ASSIGN_OR_RETURN(SessionId fresh, open_session(endpoint));
    SessionId stale{};
    {
      MutexLock lock(sessions_mu_);
      auto [it, inserted] = by_endpoint_.try_emplace(endpoint, fresh);
      if (!inserted) {
        SessionSlot* slot = find_session(it->second);
        if (slot != nullptr && slot->peer->health().ok()) {
          stale = fresh;
          fresh = it->second;
        } else {
          stale = it->second;
          it->second = fresh;
        }
      }
    }
    if (stale.generation != 0) (void)close_session(stale);
    return fresh;
  }

  EngineOptions options_;
  MemoryRegistry registry_;       // peer-writable memory and its grants
  MemoryRegistry read_only_;      // kLocalReadOnly regions: bookkeeping only, never admits
  DeviceRegions device_regions_;  // which of both are device memory (before backend_)
  BatchTable batches_;            // declared before backend_: outlives every completion
  // Also before backend_: its receiving threads deliver notes until it is destroyed.
  struct NoteSlot {
    NoteHandler handler;
    int running = 0;  // calls inside handler, guarded by note_mu_
  };
  Mutex note_mu_;
  CondVar note_idle_;
  std::shared_ptr<NoteSlot> note_slot_ PDKV_GUARDED_BY(note_mu_);
  std::unique_ptr<Backend> backend_;
  std::string endpoint_;  // immutable after start()
  Mutex ready_mu_;
  std::shared_ptr<ReadyEventPool> ready_pool_ PDKV_GUARDED_BY(ready_mu_);  // made on first use

  Mutex sessions_mu_;
  std::vector<SessionSlot> sessions_ PDKV_GUARDED_BY(sessions_mu_);
  std::vector<uint32_t> free_sessions_ PDKV_GUARDED_BY(sessions_mu_);
  std::map<std::string, SessionId> by_endpoint_ PDKV_GUARDED_BY(sessions_mu_);
};

Result<std::unique_ptr<TransferEngine>> TransferEngine::create(const EngineOptions& options) {
  if (options.tcp.streams < 1 || options.tcp.streams > 64) {
    return invalid_argument("EngineOptions.tcp.streams must be in [1, 64]");
  }
  if (options.connect_timeout_ms <= 0 || options.tcp.io_timeout_ms <= 0) {
    return invalid_argument("EngineOptions timeouts must be positive");
  }
  if (options.tcp.max_connections < 1) {
    return invalid_argument("EngineOptions.tcp.max_connections must be positive");
  }
  if (options.tcp.max_part_entries == 0) {
    return invalid_argument("EngineOptions.tcp.max_part_entries must be positive");
  }
  if (!options.cluster_key) warn_unauthenticated("transfer engine");
  auto impl = std::make_unique<Impl>(options);
  PDKV_RETURN_IF_ERROR(impl->start());
  return std::unique_ptr<TransferEngine>(new TransferEngine(std::move(impl)));
}

TransferEngine::TransferEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TransferEngine::~TransferEngine() = default;

const std::string& TransferEngine::endpoint() const { return impl_->endpoint(); }
std::string_view TransferEngine::backend_name() const { return impl_->backend_name(); }
Status TransferEngine::register_memory(uint64_t addr, uint64_t length, MemoryAccess access,
                                       MemoryKind kind, int device) {
  return impl_->register_memory(addr, length, access, kind, device);
}
const DeviceRegions& TransferEngine::device_regions() const { return impl_->device_regions(); }
Status TransferEngine::grant_writes(uint64_t grant_id, WriteGrant grant) {
  return impl_->grant_writes(grant_id, std::move(grant));
}
Status TransferEngine::revoke_writes(uint64_t grant_id, std::function<void()> on_drained,
                                     GrantEnd end) {
  return impl_->revoke_writes(grant_id, std::move(on_drained), end);
}
Status TransferEngine::unregister_memory(uint64_t addr) { return impl_->unregister_memory(addr); }
Result<SessionId> TransferEngine::open_session(const std::string& peer_endpoint) {
  return impl_->open_session(peer_endpoint);
}
Status TransferEngine::close_session(SessionId session) { return impl_->close_session(session); }
Result<BatchId> TransferEngine::submit(SessionId session, std::span<const WriteBlock> blocks) {
  return impl_->submit(session, blocks);
}
Status TransferEngine::submit_async(SessionId session, std::span<const WriteBlock> blocks,
                                    std::function<void(Status)> on_done,
                                    std::span<const uint8_t> note, SourceReady ready) {
  return impl_->submit_async(session, blocks, std::move(on_done), note, ready);
}
Result<std::shared_ptr<const ReadyEvent>> TransferEngine::mark_sources_ready(void* stream,
                                                                             int device) {
  return impl_->mark_sources_ready(stream, device);
}

bool TransferEngine::carries_notes() const { return impl_->carries_notes(); }
void TransferEngine::set_note_handler(NoteHandler handler) {
  impl_->set_note_handler(std::move(handler));
}
Result<BatchStatus> TransferEngine::poll(BatchId batch) const { return impl_->poll(batch); }
Result<BatchStatus> TransferEngine::wait(BatchId batch, std::chrono::milliseconds timeout) {
  return impl_->wait(batch, timeout);
}
Status TransferEngine::release(BatchId batch) { return impl_->release(batch); }
Status TransferEngine::transfer(SessionId session, std::span<const WriteBlock> blocks,
                                SourceReady ready) {
  return impl_->transfer(session, blocks, ready);
}
int TransferEngine::transfer_sync(SessionId session, std::span<const WriteBlock> blocks) {
  return impl_->transfer_sync(session, blocks);
}
int TransferEngine::transfer_sync(const std::string& peer_endpoint,
                                  std::span<const WriteBlock> blocks) {
  return impl_->transfer_sync(peer_endpoint, blocks);
}

}  // namespace pdkv::engine
