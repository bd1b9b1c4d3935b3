#include "engine/lease/lease_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <system_error>

#include "common/host_port.h"
#include "common/logging.h"
#include "engine/connection_slots.h"
#include "engine/grant_tag.h"
#include "engine/lease/lease_auth.h"
#include "engine/lease/messages.h"
#include "engine/memory_registry.h"
#include "engine/session_auth.h"

namespace pdkv::engine::lease {
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
  if (options_.max_connections < 1) {
    return invalid_argument("LeaseServerOptions.max_connections must be positive");
  }
  int bound = 0;
  PDKV_ASSIGN_OR_RETURN(listener_, listen_on(host, port, &bound));
  host_identity_ = host_identity();
  acceptor_ = std::thread([this] { accept_loop(); });
  return format_host_port(host, static_cast<uint16_t>(bound));
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
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    int fd = ::accept4(listener_.fd(), reinterpret_cast<sockaddr*>(&peer), &peer_len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto conn = std::make_unique<Conn>();
    conn->sock = Socket(fd);  // from here on, dropping `conn` closes the connection
    conn->address = peer_address(peer);
    Conn* raw = conn.get();
    MutexLock lock(conns_mu_);
    reap_finished_locked();
    if (stopping_.load()) return;
    if (std::string why = over_limit(conn->address); !why.empty()) {
      // Closing at once (not leaving it in the backlog) keeps the acceptor responsive and
      // tells the peer right away. Slots free as connections end: a silent one within the
      // handshake deadline.
      PDKV_LOG_WARN_LIMITED("{} backend: refused a control connection from {}: {}",
                            options_.backend_name, conn->address, why);
      continue;
    }
    set_nodelay(fd);
    try {
      conn->thread = std::thread([this, raw] { serve(raw); });
    } catch (const std::system_error& e) {
      // Out of threads (a pids limit, memory): refuse this connection, keep serving.
      PDKV_LOG_WARN_LIMITED("{} backend: refused a control connection: cannot start a thread: {}",
                            options_.backend_name, e.what());
      continue;
    }
    conns_.push_back(std::move(conn));
  }
}

std::string LeaseServer::over_limit(const std::string& address) const {
  SlotUse use;
  use.open = conns_.size();
  for (const auto& c : conns_) {
    if (c->proven.load() || c->finished.load()) continue;
    ++use.unproven;
    if (c->address == address) ++use.unproven_from_address;
  }
  return slot_refusal(static_cast<size_t>(options_.max_connections), use, address);
}

void LeaseServer::serve(Conn* conn) {
  Socket& sock = conn->sock;
  std::unique_ptr<LeaseSession> session;
  Status st = handshake(sock, &session);
  if (st.ok()) conn->proven.store(true);
  std::vector<uint8_t> payload;
  while (st.ok() && !stopping_.load()) {
    MsgType type{};
    st = sock.recv_frame(&type, &payload, now() + kIdleWait);
    if (!st.ok()) break;
    if (type == MsgType::kLease) {
      st = handle_lease(sock, payload, *session);
    } else if (type == MsgType::kRegionsReq) {
      st = send_regions(sock);
    } else {
      st = data_loss("unexpected control message type " + std::to_string(static_cast<int>(type)));
    }
  }
  if (!st.ok() && st.code() != StatusCode::kUnavailable && !stopping_.load()) {
    // Rate-limited: strangers and misconfigured peers can open connections at will.
    PDKV_LOG_WARN_LIMITED("{} backend: closing a control connection: {}", options_.backend_name,
                          st.to_string());
  }
  // Closing here (not in the destructor) tells the sender at once.
  sock.shutdown_both();
  session.reset();  // before the connection counts as finished: ~LeaseServer joins it
  conn->finished.store(true);
}

Status LeaseServer::handshake(Socket& sock, std::unique_ptr<LeaseSession>* session) {
  const int step_ms = options_.handshake_timeout_ms;
  // Membership first: the hello ack below carries what a writer needs (pid and CMA probe
  // address, the UCX worker address), and kRegions (rkeys) is served only after this
  // function returned OK.
  if (options_.cluster_key) {
    PDKV_RETURN_IF_ERROR(authenticate_lease_client(sock, *options_.cluster_key, step_ms));
  }
  auto deadline = now() + Millis(step_ms);
  MsgType type{};
  std::vector<uint8_t> payload;
  PDKV_RETURN_IF_ERROR(sock.recv_frame(&type, &payload, deadline, kMaxHandshakePayloadBytes));
  if (type == MsgType::kAuthHello) {  // reached only without a secret
    send_refusal(sock,
                 "this endpoint has no cluster secret (PDKV_SECRET_FILE) and cannot prove "
                 "membership (" +
                     std::string(kSecretMismatchHint) + ")",
                 step_ms);
    return unauthenticated(
        "peer authenticates but this engine has no cluster secret (PDKV_SECRET_FILE); "
        "refusing it");
  }
  if (type != MsgType::kHello) return data_loss("control channel: expected hello");
  PDKV_ASSIGN_OR_RETURN(Hello hello, decode_hello(payload));
  HelloAck ack;
  ack.ok = hello.backend == options_.backend_name;
  if (!ack.ok) {
    ack.message = "this endpoint runs the '" + options_.backend_name + "' backend, not '" +
                  hello.backend + "'";
  }
  ack.pid = static_cast<uint32_t>(::getpid());
  ack.host_identity = host_identity_;
  ack.lease_ms = static_cast<uint32_t>(options_.lease_ms);
  if (ack.ok) {
    auto opened = hooks_->open_session();
    if (opened.ok()) {
      *session = std::move(*opened);
      ack.extra = (*session)->hello_extra();
    } else {
      ack.ok = false;
      ack.message = "no session: " + opened.status().to_string();
    }
  }
  std::vector<uint8_t> out;
  encode_hello_ack(ack, &out);
  PDKV_RETURN_IF_ERROR(sock.send_frame(MsgType::kHelloAck, out, deadline));
  if (!ack.ok) return failed_precondition(ack.message);
  return Status();
}

Status LeaseServer::handle_lease(Socket& sock, std::span<const uint8_t> payload,
                                 LeaseSession& session) {
  PDKV_ASSIGN_OR_RETURN(LeaseRequest req, decode_lease(payload));
  const uint64_t part_id = req.part_id;
  const std::vector<DstRange>& ranges = req.ranges;
  // Admitted ranges stay pinned until the sender reports the part done: unregister and
  // grant revocation wait for them (memory_registry.h).
  std::string unwritable_why;
  if (size_t bad = hooks_->unwritable(ranges, &unwritable_why); bad < ranges.size()) {
    Grant refused;
    refused.part_id = part_id;
    refused.bad_index = static_cast<uint32_t>(bad);
    refused.first_bad = ranges[bad].addr;
    refused.regions_epoch = hooks_->regions_epoch();
    refused.message = "destination [" + std::to_string(ranges[bad].addr) + ", +" +
                      std::to_string(ranges[bad].length) + ") " + unwritable_why;
    std::vector<uint8_t> out;
    encode_grant(refused, &out);
    return sock.send_frame(MsgType::kGrant, out, now() + Millis(options_.lease_ms));
  }
  std::vector<MemoryRegistry::WriteRun> runs;
  runs.reserve(ranges.size());
  for (const DstRange& r : ranges) runs.push_back({r.addr, r.length, 1, 0, r.grant});
  auto admission = std::make_unique<MemoryRegistry::Admission>();
  uint64_t first_bad = 0;
  size_t bad = registry_->admit(runs, *admission, &first_bad);
  Grant grant;
  grant.part_id = part_id;
  grant.ok = bad == ranges.size();
  grant.bad_index = static_cast<uint32_t>(grant.ok ? 0 : bad);
  grant.first_bad = first_bad;
  grant.regions_epoch = hooks_->regions_epoch();
  std::vector<uint8_t> out;
  if (!grant.ok) {
    // The grant by its tag, never its id (a capability; the sender logs this message).
    grant.message = "destination [" + std::to_string(ranges[bad].addr) + ", +" +
                    std::to_string(ranges[bad].length) + ") under " + grant_tag(ranges[bad].grant) +
                    " is not inside registered (and granted) memory (first refused address " +
                    std::to_string(first_bad) + ")";
    encode_grant(grant, &out);
    return sock.send_frame(MsgType::kGrant, out, now() + Millis(options_.lease_ms));
  }
  encode_grant(grant, &out);
  auto granted_at = now();
  PDKV_RETURN_IF_ERROR(
      sock.send_frame(MsgType::kGrant, out, granted_at + Millis(options_.lease_ms)));
  // The sender's deadline started before ours; the slack covers one bounded syscall.
  auto expiry = granted_at + Millis(options_.lease_ms) + Millis(options_.lease_ms / 4 + 100);
  session.lease_activity(+1);
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
  session.lease_activity(-1);
  admission->release();
  if (!st.ok()) {
    if (st.code() == StatusCode::kDeadlineExceeded) {
      return deadline_exceeded("lease on part " + std::to_string(part_id) + " expired after " +
                               std::to_string(options_.lease_ms) + " ms without done");
    }
    return st;
  }
  if (type != MsgType::kDone) return data_loss("expected done for part " + std::to_string(part_id));
  PDKV_ASSIGN_OR_RETURN(uint64_t done_id, decode_part_id(done));
  if (done_id != part_id) return data_loss("expected done for part " + std::to_string(part_id));
  std::vector<uint8_t> ack;
  encode_part_id(part_id, &ack);
  return sock.send_frame(MsgType::kDoneAck, ack, now() + Millis(options_.lease_ms));
}

Status LeaseServer::send_regions(Socket& sock) {
  std::vector<uint8_t> reply;
  PDKV_RETURN_IF_ERROR(hooks_->regions_payload(&reply));
  return sock.send_frame(MsgType::kRegions, reply, now() + Millis(options_.lease_ms));
}

}  // namespace pdkv::engine::lease
