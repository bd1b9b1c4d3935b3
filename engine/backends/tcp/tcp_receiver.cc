#include "engine/backends/tcp/tcp_receiver.h"

#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "engine/backend.h"
#include "engine/backends/tcp/device_copies.h"
#include "engine/backends/tcp/device_slab_ring.h"
#include "engine/backends/tcp/stage_buffer.h"
#include "engine/backends/tcp/tcp_auth.h"
#include "engine/backends/tcp/tcp_frame.h"
#include "engine/connection_slots.h"
#include "engine/device/device_regions.h"
#include "engine/grant_tag.h"
#include "engine/memory_registry.h"

namespace pdkv::engine::tcp {

namespace {

constexpr int kMaxIov = IOV_MAX < 1024 ? IOV_MAX : 1024;
constexpr size_t kScratchBytes = 256 * 1024;
constexpr size_t kTableChunkBytes = 64 * 1024;

}  // namespace

// Per-connection buffers, reused across parts so the hot path does not allocate.
struct ReceiveBuffers {
  std::vector<uint8_t> table;
  std::vector<WireEntry> entries;
  std::vector<MemoryRegistry::WriteRun> runs;  // the entries, as the registry checks them
  MemoryRegistry::Admission admission;         // held while a part's bytes land
  std::vector<uint8_t> scratch;                // discarded payload of a rejected part
  std::vector<uint8_t> note;                   // the part's batch note (batch_note.h)
  StageBuffer stage;  // small entries land here, then memcpy to their places
  iovec iov[kMaxIov];
  // Parts with device destinations: the entries as payload runs with their devices, and
  // the slabs of the device last written (created on first use, on this thread).
  std::vector<PayloadRun> device_runs;
  std::unique_ptr<DeviceSlabRing> ring;
};

namespace {

bool is_staged(const WireEntry& e, uint64_t stage_max) {
  return e.pieces == 1 && e.length <= stage_max;
}

// How long a part may go on landing under a grant whose room ended. A sender's part
// lands in milliseconds; one still landing a second after its room ended is a writer
// trickling bytes, and until its part is done the room's end stays hidden and its pages
// held (memory_registry.h).
constexpr std::chrono::milliseconds kRevokedGrantGrace{1000};

// The ReadCheck of a part's payload reads: stop when a grant it lands under was revoked
// longer than kRevokedGrantGrace ago. The connection is then closed (the writer sees its
// part fail; a resend is refused, naming the revoked grant), which releases the part's
// admission, and with it the room's end.
Status part_still_wanted(const void* context) {
  const auto* admission = static_cast<const MemoryRegistry::Admission*>(context);
  if (std::optional<uint64_t> grant = admission->revoked_for(kRevokedGrantGrace, now())) {
    return failed_precondition(
        fmt::format("the room of write {} ended more than {} ms ago while this part "
                    "was still landing under it (a writer trickling bytes?): part cut, "
                    "connection closed",
                    grant_tag(*grant), kRevokedGrantGrace.count()));
  }
  return Status();
}

ReadCheck part_check(const ReceiveBuffers& buf) {
  return ReadCheck{&part_still_wanted, &buf.admission};
}

}  // namespace

// Index of the first entry the registry refuses (outside registered memory, or outside
// the write grant it names), with its first refused address; or entries.size(), with the
// part's destinations pinned in buf.admission until it is released.
size_t TcpReceiver::admit_entries(ReceiveBuffers& buf, uint64_t* bad_addr, Refusal* why) const {
  buf.runs.clear();
  for (const WireEntry& e : buf.entries) {
    buf.runs.push_back({e.addr, e.length, e.pieces, e.stride, e.grant});
  }
  return registry_->admit(buf.runs, buf.admission, bad_addr, why);
}

// Reads a validated part's payload into its destinations, in entry order: runs of small
// single-piece entries through the staging buffer (one contiguous read, then memcpy), the
// rest straight in with readv (adjacent destinations share an iovec).
Status TcpReceiver::scatter(int fd, ReceiveBuffers& buf, int stop) const {
  const int io = options_.io_timeout_ms;
  const auto& entries = buf.entries;
  const uint64_t stage_max = options_.stage_max_bytes;
  size_t i = 0;
  uint64_t piece = 0;  // next piece of entries[i] (readv may stop inside a run)
  while (i < entries.size()) {
    if (piece == 0 && is_staged(entries[i], stage_max)) {
      size_t end = i;
      uint64_t bytes = 0;
      while (end < entries.size() && is_staged(entries[end], stage_max) &&
             (end == i || bytes + entries[end].length <= options_.stage_buffer_bytes)) {
        bytes += entries[end].length;
        ++end;
      }
      uint8_t* stage = buf.stage.reserve(bytes);
      PDKV_RETURN_IF_ERROR(read_full(fd, stage, bytes, stop, io, io, part_check(buf)));
      const uint8_t* src = stage;
      for (; i < end; ++i) {
        std::memcpy(reinterpret_cast<void*>(entries[i].addr), src, entries[i].length);
        src += entries[i].length;
      }
      continue;
    }
    int n_iov = 0;
    while (i < entries.size() && n_iov < kMaxIov &&
           (piece > 0 || !is_staged(entries[i], stage_max))) {
      const WireEntry& e = entries[i];
      auto* base = reinterpret_cast<uint8_t*>(e.addr + piece * e.stride);
      if (n_iov > 0 &&
          static_cast<uint8_t*>(buf.iov[n_iov - 1].iov_base) + buf.iov[n_iov - 1].iov_len == base) {
        buf.iov[n_iov - 1].iov_len += e.length;
      } else {
        buf.iov[n_iov++] = iovec{base, e.length};
      }
      if (++piece == e.pieces) {
        piece = 0;
        ++i;
      }
    }
    PDKV_RETURN_IF_ERROR(readv_full(fd, buf.iov, n_iov, stop, io, part_check(buf)));
  }
  return Status();
}

TcpReceiver::TcpReceiver(const TcpOptions& options, const MemoryRegistry* registry,
                         const DeviceRegions* device_regions,
                         std::shared_ptr<const ClusterKey> cluster_key, NoteSink* notes)
    : options_(options),
      registry_(registry),
      device_regions_(device_regions),
      cluster_key_(std::move(cluster_key)),
      notes_(notes) {}

// Reads and drops `bytes` of payload.
static Status discard(int fd, ReceiveBuffers& buf, uint64_t bytes, int stop, int io) {
  if (buf.scratch.empty()) buf.scratch.resize(kScratchBytes);
  while (bytes > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes, buf.scratch.size()));
    PDKV_RETURN_IF_ERROR(read_full(fd, buf.scratch.data(), n, stop, io, io));
    bytes -= n;
  }
  return Status();
}

bool TcpReceiver::mark_destination_devices(ReceiveBuffers& buf, int* device, size_t* bad) const {
  *device = -1;
  buf.device_runs.clear();
  if (device_regions_ == nullptr || device_regions_->empty()) return true;
  bool any_device = false;
  for (size_t i = 0; i < buf.entries.size(); ++i) {
    const WireEntry& e = buf.entries[i];
    const DeviceRegions::RunPlace place =
        device_regions_->place_run(e.addr, e.length, e.pieces, e.stride);
    const int d = place.device;
    // Straddling device memory's edge, or two devices in one part (a sender never plans
    // that: one process writes one device's pool), is refused before any byte lands.
    if (d == DeviceRegions::kMixed || (d >= 0 && *device >= 0 && d != *device)) {
      *bad = i;
      return false;
    }
    if (d >= 0) {
      *device = d;
      any_device = true;
    }
    buf.device_runs.push_back(PayloadRun{e.addr, e.length, e.pieces, e.stride, d, place.piecewise});
  }
  if (!any_device) buf.device_runs.clear();
  return true;
}

Status TcpReceiver::scatter_device(int fd, ReceiveBuffers& buf, int device, int stop,
                                   Status* copy_error) const {
  const int io = options_.io_timeout_ms;
  if (buf.ring && (buf.ring->device() != device || buf.ring->broken())) buf.ring.reset();
  if (!buf.ring) {
    DeviceDriver* driver = device_driver();
    Result<std::unique_ptr<DeviceSlabRing>> ring =
        driver == nullptr
            ? Result<std::unique_ptr<DeviceSlabRing>>(
                  failed_precondition("no device driver: " + device_driver_absent_reason()))
            : DeviceSlabRing::create(driver, device, static_cast<size_t>(options_.device_slabs),
                                     options_.device_slab_bytes);
    if (ring.ok()) {
      buf.ring = std::move(*ring);
    } else {
      *copy_error = ring.status();
    }
  }
  DeviceSlabRing* ring = buf.ring.get();
  DeviceDriver* driver = ring != nullptr ? ring->driver() : nullptr;
  if (ring != nullptr) {
    Status bound = driver->bind_thread(device);
    if (!bound.ok()) *copy_error = bound;
  }
  uint64_t total = 0;
  for (const PayloadRun& r : buf.device_runs) total += r.bytes();
  PayloadCursor cursor;
  bool issued_any = false;
  size_t last_slab = 0;
  for (uint64_t off = 0, k = 0; off < total; ++k) {
    if (!copy_error->ok()) {
      // The rest of the payload is still read, so the connection stays in step, but it
      // lands nowhere.
      return discard(fd, buf, total - off, stop, io);
    }
    const size_t s = static_cast<size_t>(k % ring->size());
    if (k >= ring->size()) {
      // The slab's previous copies must have landed before the socket overwrites it.
      Status waited = driver->event_wait(ring->event(s));
      if (!waited.ok()) {
        *copy_error = waited;
        continue;
      }
    }
    const uint64_t n = std::min<uint64_t>(ring->slab_bytes(), total - off);
    PDKV_RETURN_IF_ERROR(read_full(fd, ring->slab(s), n, stop, io, io, part_check(buf)));
    Status issued = copy_payload(driver, ring->stream(), buf.device_runs, off, off + n,
                                 ring->slab(s), SlabDirection::kFromSlab, &cursor);
    if (issued.ok()) issued = driver->record(ring->event(s), ring->stream());
    if (!issued.ok()) *copy_error = issued;
    issued_any = true;
    last_slab = s;
    off += n;
  }
  // Applied means landed: the ACK waits for the last copies. The last slab's event was
  // recorded after everything issued on the stream (a blocking-sync event: this thread
  // sleeps through the wait instead of polling a core).
  if (copy_error->ok() && issued_any) {
    Status synced = driver->event_wait(ring->event(last_slab));
    if (!synced.ok()) *copy_error = synced;
  }
  if (!copy_error->ok() && ring != nullptr) ring->mark_broken();
  return Status();
}

TcpReceiver::~TcpReceiver() {
  stop_.signal();
  if (acceptor_.joinable()) acceptor_.join();
  MutexLock lock(conns_mu_);
  reap_finished(true);
}

void TcpReceiver::start(UniqueFd listen_fd) {
  listen_fd_ = std::move(listen_fd);
  acceptor_ = std::thread([this] { accept_loop(); });
}

void TcpReceiver::reap_finished(bool all) {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (all || (*it)->done.load(std::memory_order_acquire)) {
      (*it)->thread.join();
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

std::string TcpReceiver::over_limit(const std::string& address) const {
  SlotUse use;
  use.open = conns_.size();
  for (const auto& c : conns_) {
    if (c->proven.load(std::memory_order_acquire) || c->done.load(std::memory_order_acquire)) {
      continue;
    }
    ++use.unproven;
    if (c->address == address) ++use.unproven_from_address;
  }
  return slot_refusal(static_cast<size_t>(options_.max_connections), use, address);
}

void TcpReceiver::accept_loop() {
  while (true) {
    Status ready = wait_fd(listen_fd_.get(), POLLIN, stop_.fd(), -1);
    if (ready.code() == StatusCode::kAborted) return;
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    int fd = ::accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&peer), &peer_len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        PDKV_LOG_WARN("tcp receiver: accept: {}", std::strerror(errno));
        if (errno == EMFILE || errno == ENFILE) (void)wait_fd(-1, 0, stop_.fd(), 100);
      }
      continue;
    }
    tune_socket(fd, options_);
    const std::string address = peer_address(peer);
    MutexLock lock(conns_mu_);
    reap_finished(false);
    if (std::string why = over_limit(address); !why.empty()) {
      // Refusing at once (not leaving it in the backlog) keeps the acceptor responsive and
      // tells the peer right away, and why.
      refuse_connection(fd, unavailable("no connection slot for it: " + why));
      PDKV_LOG_WARN_LIMITED("tcp receiver: refused a connection from {}: {}", address, why);
      continue;
    }
    auto conn = std::make_unique<Connection>();
    conn->address = address;
    Connection* raw = conn.get();
    try {
      conn->thread = std::thread([this, fd, raw] {
        serve(fd, raw);
        raw->done.store(true, std::memory_order_release);
      });
    } catch (const std::system_error& e) {
      // Out of threads (a pids limit, memory): refuse this connection, keep serving.
      ::close(fd);
      PDKV_LOG_WARN_LIMITED("tcp receiver: refused a connection: cannot start a thread: {}",
                            e.what());
      continue;
    }
    conns_.push_back(std::move(conn));
  }
}

void TcpReceiver::serve(int raw_fd, Connection* conn) {
  UniqueFd fd(raw_fd);
  const int io = options_.io_timeout_ms;
  const int stop = stop_.fd();
  ReceiveBuffers buf;
  uint8_t header_bytes[kHeaderSize];
  // The loop returns (closing the connection) on any error; the reason is logged.
  auto drop = [&](const Status& why) {
    if (why.code() == StatusCode::kAborted) return;  // shutdown
    if (why.code() == StatusCode::kUnavailable) {
      PDKV_LOG_DEBUG("tcp receiver: connection closed: {}", why.to_string());
    } else {
      PDKV_LOG_WARN_LIMITED("tcp receiver: dropping connection: {}", why.to_string());
    }
  };
  if (cluster_key_) {
    Status auth = authenticate_sender(fd.get(), *cluster_key_, stop, io);
    if (!auth.ok()) return drop(auth);
    conn->proven.store(true, std::memory_order_release);
  }
  // A fresh connection must speak at once; an established one may idle between parts.
  int first_byte_timeout = io;
  while (true) {
    Status st = read_full(fd.get(), header_bytes, kHeaderSize, stop, first_byte_timeout, io);
    if (!st.ok()) return drop(st);
    first_byte_timeout = -1;
    // Without a secret nothing proves a peer: its first frame is as far as we can tell.
    conn->proven.store(true, std::memory_order_release);
    Result<FrameHeader> header = decode_header(std::span<const uint8_t>(header_bytes, kHeaderSize),
                                               options_.max_part_entries);
    if (!header.ok()) return drop(header.status());
    if (header->type == FrameType::kHello) {
      FrameHeader reply;
      reply.type = FrameType::kHelloAck;
      reply.aux = header->aux;
      encode_header(reply, header_bytes);
      st = write_full(fd.get(), header_bytes, kHeaderSize, stop, io);
      if (!st.ok()) return drop(st);
      continue;
    }
    if (header->type == FrameType::kAuthHello) {
      return drop(unauthenticated(
          "peer authenticates but this engine has no cluster secret (PDKV_SECRET_FILE); "
          "refusing it"));
    }
    if (header->type != FrameType::kPart) return drop(data_loss("unexpected frame type"));

    // The table grows as its bytes arrive, so a header that only declares a huge count
    // costs one chunk, not the declared size.
    const size_t table_bytes = size_t{header->count} * kEntrySize;
    buf.table.clear();
    while (st.ok() && buf.table.size() < table_bytes) {
      const size_t have = buf.table.size();
      const size_t n = std::min(table_bytes - have, kTableChunkBytes);
      buf.table.resize(have + n);
      st = read_full(fd.get(), buf.table.data() + have, n, stop, io, io);
    }
    if (!st.ok()) return drop(st);
    st = decode_entries(buf.table, *header, &buf.entries);
    if (!st.ok()) return drop(st);
    buf.note.resize((header->flags & kPartHasNote) != 0 ? header->aux : 0);  // aux is bounded
    if (!buf.note.empty()) st = read_full(fd.get(), buf.note.data(), buf.note.size(), stop, io, io);
    if (!st.ok()) return drop(st);

    uint64_t bad_addr = 0;
    Refusal why = Refusal::kNotWritable;
    size_t bad = admit_entries(buf, &bad_addr, &why);
    Status verdict;
    uint64_t written = 0;
    int device = -1;
    if (bad == buf.entries.size() && !mark_destination_devices(buf, &device, &bad)) {
      buf.admission.release();
      bad_addr = buf.entries[bad].addr;
      verdict = out_of_range(fmt::format(
          "entry {} (dst {:#x}, {} x {} bytes, stride {}) straddles the edge of registered "
          "device memory, or the part writes two devices; part rejected",
          bad, bad_addr, buf.entries[bad].pieces, buf.entries[bad].length,
          buf.entries[bad].stride));
      PDKV_LOG_WARN_LIMITED("tcp receiver: {}", verdict.message());
      st = discard(fd.get(), buf, header->payload_bytes, stop, io);
    } else if (bad == buf.entries.size() && device >= 0) {
      Status copy_error;
      st = scatter_device(fd.get(), buf, device, stop, &copy_error);
      buf.admission.release();
      if (copy_error.ok()) {
        written = header->payload_bytes;
      } else {
        // FailedPrecondition, the driver's code in the message: the part's blocks could not
        // land here, the connection is fine (the sender fails that batch's rooms only).
        verdict = failed_precondition("landing the part in CUDA device " + std::to_string(device) +
                                      " memory failed: " + copy_error.to_string());
        PDKV_LOG_WARN_LIMITED("tcp receiver: {}", verdict.message());
      }
    } else if (bad < buf.entries.size()) {
      const WireEntry& e = buf.entries[bad];
      if (why == Refusal::kGrantCompleted) {
        // A retry whose first attempt's acknowledgement was lost: the room already
        // succeeded here, so the sender may count it done. Nothing is written.
        // The grant is named by its tag, never its id: the id is a capability, and this
        // message is logged here and by the sender (grant_tag.h).
        verdict = already_completed(
            fmt::format("entry {} names {}, whose room already succeeded; part not written", bad,
                        grant_tag(e.grant)));
      } else {
        verdict = out_of_range(fmt::format(
            "entry {} (dst {:#x}, {} x {} bytes, stride {}, {}) is not inside "
            "registered memory{}; part rejected",
            bad, e.addr, e.pieces, e.length, e.stride, grant_tag(e.grant),
            e.grant != 0 || registry_->requires_grants() ? " granted under that grant" : ""));
      }
      PDKV_LOG_WARN_LIMITED("tcp receiver: {}", verdict.message());
      st = discard(fd.get(), buf, header->payload_bytes, stop, io);
    } else {
      st = scatter(fd.get(), buf, stop);
      buf.admission.release();
      written = header->payload_bytes;
    }
    if (!st.ok()) return drop(st);
    // After the bytes landed and their admission ended (the handler may revoke the grant
    // they landed under), before the ACK: a batch that succeeded had its note handled.
    if (verdict.ok() && !buf.note.empty() && notes_ != nullptr) notes_->on_note(buf.note);
    std::vector<uint8_t> ack =
        encode_ack(header->part_id, written, verdict, bad < buf.entries.size() ? bad : 0, bad_addr);
    st = write_full(fd.get(), ack.data(), ack.size(), stop, io);
    if (!st.ok()) return drop(st);
  }
}

}  // namespace pdkv::engine::tcp
