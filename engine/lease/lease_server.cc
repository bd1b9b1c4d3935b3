#include "engine/backends/shm/lease_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>

#include "common/logging.h"
#include "engine/memory_registry.h"

namespace pdkv::engine::shm {
namespace {

// Idle connections wait "forever"; the destructor wakes them with shutdown().
constexpr Millis kIdleWait{24LL * 3600 * 1000};

}  // namespace

LeaseServer::LeaseServer(LeaseServerOptions options, MemoryRegistry* registry,
                         LeaseServerHooks* hooks)
    : options_(std::move(options)), registry_(registry), hooks_(hooks) {}

LeaseServer::~LeaseServer() {
  stopping_.store(true);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::unique_ptr<Conn>> conns;
  {
    MutexLock lock(conns_mu_);
    conns.swap(conns_);
    for (auto& c : conns) c->sock.shutdown_both();
  }
  for (auto& c : conns) c->thread.join();
}

Result<std::string> LeaseServer::listen(const std::string& host, int port) {
  int bound = 0;
  PDKV_ASSIGN_OR_RETURN(listener_, listen_on(host, port, &bound));
  host_identity_ = host_identity();
  acceptor_ = std::thread([this] { accept_loop(); });
  return host + ":" + std::to_string(bound);
}

void LeaseServer::reap_finished_locked() {
  for (size_t i = 0; i < conns_.size();) {
    if (conns_[i]->finished.load()) {
      conns_[i]->thread.join();
      conns_[i] = std::move(conns_.back());
      conns_.pop_back();
    } else {
      ++i;
    }
  }
}

void LeaseServer::accept_loop() {
  while (!stopping_.load()) {
    // A short poll keeps shutdown prompt without a wake-up pipe.
    pollfd p{listener_.fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    set_nodelay(fd);
    auto conn = std::make_unique<Conn>();
    conn->sock = Socket(fd);
    Conn* raw = conn.get();
    MutexLock lock(conns_mu_);
    reap_finished_locked();
    if (stopping_.load()) return;  // conn's socket closes with it
    conn->thread = std::thread([this, raw] { serve(raw); });
    conns_.push_back(std::move(conn));
  }
}

void LeaseServer::serve(Conn* conn) {
  Socket& sock = conn->sock;
  Status st = handshake(sock);
  std::vector<uint8_t> payload;
  while (st.ok() && !stopping_.load()) {
    MsgType type{};
    st = sock.recv_frame(&type, &payload, now() + kIdleWait);
    if (!st.ok()) break;
    if (type == MsgType::kLease) {
      st = handle_lease(sock, payload);
    } else if (type == MsgType::kRegionsReq) {
      st = send_regions(sock);
    } else {
      st = data_loss("unexpected control message type " + std::to_string(static_cast<int>(type)));
    }
  }
  if (!st.ok() && st.code() != StatusCode::kUnavailable && !stopping_.load()) {
    PDKV_LOG_WARN("{} backend: closing a control connection: {}", options_.backend_name,
                  st.to_string());
  }
  // Closing here (not in the destructor) tells the sender at once.
  sock.shutdown_both();
  conn->finished.store(true);
}

Status LeaseServer::handshake(Socket& sock) {
  auto deadline = now() + Millis(options_.handshake_timeout_ms);
  MsgType type{};
  std::vector<uint8_t> payload;
  PDKV_RETURN_IF_ERROR(sock.recv_frame(&type, &payload, deadline));
  if (type != MsgType::kHello) return data_loss("control channel: expected hello");
  Reader in(payload);
  std::string backend, identity;
  PDKV_RETURN_IF_ERROR(in.bytes(&backend));
  PDKV_RETURN_IF_ERROR(in.bytes(&identity));
  std::string message;
  bool ok = true;
  if (backend != options_.backend_name) {
    ok = false;
    message =
        "this endpoint runs the '" + options_.backend_name + "' backend, not '" + backend + "'";
  }
  std::vector<uint8_t> out;
  Writer w(out);
  w.u8(ok ? 1 : 0);
  w.bytes(message);
  w.u32(static_cast<uint32_t>(::getpid()));
  w.bytes(host_identity_);
  w.u32(static_cast<uint32_t>(options_.lease_ms));
  w.bytes(ok ? hooks_->hello_extra() : std::string());
  PDKV_RETURN_IF_ERROR(sock.send_frame(MsgType::kHelloAck, out, deadline));
  if (!ok) return failed_precondition(message);
  return Status();
}

Status LeaseServer::handle_lease(Socket& sock, std::span<const uint8_t> payload) {
  Reader in(payload);
  uint64_t part_id = 0;
  uint32_t count = 0;
  PDKV_RETURN_IF_ERROR(in.u64(&part_id));
  PDKV_RETURN_IF_ERROR(in.u32(&count));
  // Validate the declared count against the bytes present before allocating for it.
  if (in.remaining() != static_cast<size_t>(count) * 16) {
    return data_loss("lease declares " + std::to_string(count) + " ranges but carries " +
                     std::to_string(in.remaining()) + " bytes");
  }
  std::vector<DstRange> ranges(count);
  for (auto& r : ranges) {
    PDKV_RETURN_IF_ERROR(in.u64(&r.addr));
    PDKV_RETURN_IF_ERROR(in.u64(&r.length));
  }
  // Pin first, then check: remove() waits for this pin, so a region validated here
  // cannot disappear before the sender reports the part done.
  std::optional<MemoryRegistry::WritePin> pin(registry_->pin());
  uint64_t first_bad = 0;
  size_t bad = registry_->check_all(ranges, &first_bad);
  std::vector<uint8_t> out;
  Writer w(out);
  w.u64(part_id);
  w.u8(bad == ranges.size() ? 1 : 0);
  w.u32(static_cast<uint32_t>(bad == ranges.size() ? 0 : bad));
  w.u64(first_bad);
  w.u64(hooks_->regions_epoch());
  if (bad != ranges.size()) {
    pin.reset();
    w.bytes("destination [" + std::to_string(ranges[bad].addr) + ", +" +
            std::to_string(ranges[bad].length) + ") is not inside registered memory (first " +
            "uncovered address " + std::to_string(first_bad) + ")");
    return sock.send_frame(MsgType::kGrant, out, now() + Millis(options_.lease_ms));
  }
  w.bytes("");
  auto granted_at = now();
  PDKV_RETURN_IF_ERROR(
      sock.send_frame(MsgType::kGrant, out, granted_at + Millis(options_.lease_ms)));
  // The sender's deadline started before ours; the slack covers one bounded syscall.
  auto expiry = granted_at + Millis(options_.lease_ms) + Millis(options_.lease_ms / 4 + 100);
  hooks_->lease_activity(+1);
  MsgType type{};
  std::vector<uint8_t> done;
  Status st;
  for (;;) {
    st = sock.recv_frame(&type, &done, expiry);
    // A UCX sender whose rkey table is stale fetches the new one under the lease.
    if (!st.ok() || type != MsgType::kRegionsReq) break;
    st = send_regions(sock);
    if (!st.ok()) break;
  }
  hooks_->lease_activity(-1);
  pin.reset();
  if (!st.ok()) {
    if (st.code() == StatusCode::kDeadlineExceeded) {
      return deadline_exceeded("lease on part " + std::to_string(part_id) + " expired after " +
                               std::to_string(options_.lease_ms) + " ms without done");
    }
    return st;
  }
  Reader din(done);
  uint64_t done_id = 0;
  PDKV_RETURN_IF_ERROR(din.u64(&done_id));
  if (type != MsgType::kDone || done_id != part_id) {
    return data_loss("expected done for part " + std::to_string(part_id));
  }
  std::vector<uint8_t> ack;
  Writer(ack).u64(part_id);
  return sock.send_frame(MsgType::kDoneAck, ack, now() + Millis(options_.lease_ms));
}

Status LeaseServer::send_regions(Socket& sock) {
  std::vector<uint8_t> reply;
  PDKV_RETURN_IF_ERROR(hooks_->regions_payload(&reply));
  return sock.send_frame(MsgType::kRegions, reply, now() + Millis(options_.lease_ms));
}

}  // namespace pdkv::engine::shm
