// ZmqEndpoint: start, shutdown and the send side. The receive thread is in
// zmq_endpoint_receive.cc, death detection in peer_monitor.cc.
#include "proto/zmq_endpoint.h"

#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "common/config.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "proto/endpoint_settings.h"
#include "proto/peer_monitor.h"
#include "proto/zap_authenticator.h"
#include "proto/zmq_socket_budget.h"

namespace pdkv::proto {

Result<EndpointOptions> EndpointOptions::from(const config::Settings& settings) {
  PDKV_ASSIGN_OR_RETURN(std::shared_ptr<const ClusterKey> key, ClusterKey::from(settings));
  return from(settings, std::move(key));
}

Result<EndpointOptions> EndpointOptions::from(const config::Settings& settings,
                                              std::shared_ptr<const ClusterKey> cluster_key) {
  EndpointOptions o;
  PDKV_ASSIGN_OR_RETURN(int64_t hwm, config::read<kZmqSndHwm>(settings));
  o.send_hwm = static_cast<int>(hwm);
  PDKV_ASSIGN_OR_RETURN(int64_t peers, config::read<kZmqMaxPeers>(settings));
  o.max_peers = static_cast<size_t>(peers);
  o.cluster_key = std::move(cluster_key);
  return o;
}

namespace {

// A raw 32-byte CURVE key (libzmq takes 32 binary bytes or 40 Z85 characters).
void set_key(zmq::socket_t& socket, int option, const std::array<uint8_t, 32>& key) {
  if (zmq_setsockopt(socket.handle(), option, key.data(), key.size()) != 0) {
    throw zmq::error_t();
  }
}

}  // namespace

bool is_urgent(const Message& message) {
  return std::holds_alternative<Ping>(message) || std::holds_alternative<Pong>(message);
}

ZmqEndpoint::ZmqEndpoint(const EndpointOptions& options, Handler handler,
                         PeerGoneHandler on_peer_gone, PeerRefusedHandler on_peer_refused)
    : options_(options),
      handler_(std::move(handler)),
      on_peer_gone_(std::move(on_peer_gone)),
      on_peer_refused_(std::move(on_peer_refused)),
      context_(1) {}

Result<std::unique_ptr<ZmqEndpoint>> ZmqEndpoint::start(const EndpointOptions& options,
                                                        Handler handler,
                                                        PeerGoneHandler on_peer_gone,
                                                        PeerRefusedHandler on_peer_refused) {
  if (options.drain_batch == 0 || options.send_hwm <= 0 || options.reconnect_interval_ms <= 0) {
    return invalid_argument(
        "zmq endpoint: drain_batch, send_hwm and reconnect_interval_ms must be positive");
  }
  std::unique_ptr<ZmqEndpoint> ep(new ZmqEndpoint(
      options, std::move(handler), std::move(on_peer_gone), std::move(on_peer_refused)));
  ep->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ep->wake_fd_ < 0) {
    return unavailable(
        fmt::format("zmq endpoint: eventfd: {}", std::generic_category().message(errno)));
  }
  {
    // Before the first socket: ZeroMQ reads the limit when it creates one.
    const size_t descriptors =
        raise_descriptor_limit(options.max_peers * kDescriptorsPerPeer + kReservedDescriptors);
    SocketBudget budget = plan_socket_budget(
        options.max_peers, ep->context_.get(zmq::ctxopt::socket_limit), descriptors);
    // Fewer than wanted is common (Debian's default soft limit); it matters only when
    // it falls below the managers' own peer caps' order of magnitude.
    if (!budget.warning.empty() && budget.max_peers < 1024) {
      PDKV_LOG_WARN("{}", budget.warning);
    } else if (!budget.warning.empty()) {
      PDKV_LOG_INFO("{}", budget.warning);
    }
    ep->context_.set(zmq::ctxopt::max_sockets, budget.max_sockets);
    ep->max_peers_ = budget.max_peers;
  }
  if (options.cluster_key) {
    ep->curve_server_ = options.cluster_key->curve_pair(KeyUse::kCurveServer);
    ep->curve_client_ = options.cluster_key->curve_pair(KeyUse::kCurveClient);
    auto zap = ZapAuthenticator::start(ep->context_, ep->curve_client_.public_key);
    if (!zap.ok()) return zap.status();
    ep->zap_ = std::move(zap).value();
  } else {
    warn_unauthenticated("control plane");
  }
  try {
    ep->pull_ = zmq::socket_t(ep->context_, zmq::socket_type::pull);
    ep->pull_.set(zmq::sockopt::linger, options.linger_ms);
    if (options.cluster_key) {
      ep->pull_.set(zmq::sockopt::curve_server, 1);
      set_key(ep->pull_, ZMQ_CURVE_SECRETKEY, ep->curve_server_.secret_key);
      // A domain makes libzmq consult the ZAP handler for every connection.
      ep->pull_.set(zmq::sockopt::zap_domain, "pdkv");
    }
    ep->pull_.set(zmq::sockopt::rcvhwm, options.send_hwm);
    // A frame larger than any valid body makes ZeroMQ drop the connection before it
    // allocates the frame.
    ep->pull_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxBodyBytes + kHeaderBytes));
    ep->pull_.bind(fmt::format("tcp://{}:*", options.bind_host));
    Result<HostPort> bound = parse_tcp_endpoint(ep->pull_.get(zmq::sockopt::last_endpoint));
    if (!bound.ok()) return bound.status().with_context("zmq endpoint: bound address");
    const std::string& host =
        options.advertise_host.empty() ? options.bind_host : options.advertise_host;
    ep->endpoint_ = format_tcp_endpoint(host, bound->port);
  } catch (const zmq::error_t& e) {
    return unavailable(
        fmt::format("zmq endpoint: cannot bind tcp://{}:*: {}", options.bind_host, e.what()));
  }
  ZmqEndpoint* raw = ep.get();
  ep->receiver_ = std::thread([raw] { raw->receive_loop(); });
  PDKV_LOG_DEBUG("zmq endpoint: listening on {}", ep->endpoint_);
  return ep;
}

ZmqEndpoint::~ZmqEndpoint() {
  shutdown();
  // Here, not in shutdown(): a forget_peer() racing shutdown() may still wake().
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void ZmqEndpoint::set_curve_client(zmq::socket_t& socket) const {
  if (!options_.cluster_key) return;
  set_key(socket, ZMQ_CURVE_SERVERKEY, curve_server_.public_key);
  set_key(socket, ZMQ_CURVE_PUBLICKEY, curve_client_.public_key);
  set_key(socket, ZMQ_CURVE_SECRETKEY, curve_client_.secret_key);
}

Result<std::shared_ptr<ZmqEndpoint::PeerSocket>> ZmqEndpoint::peer_socket(
    const std::string& peer_endpoint) {
  MutexLock lock(peers_mu_);
  if (shut_down_) return aborted("zmq endpoint is shut down");
  auto it = peers_.find(peer_endpoint);
  if (it != peers_.end()) return it->second;
  if (peers_.size() >= max_peers_) {
    ++peers_over_cap_;
    return unavailable(fmt::format(
        "zmq endpoint: {} peers have a socket already (PDKV_ZMQ_MAX_PEERS); not connecting to {}",
        peers_.size(), peer_endpoint));
  }
  auto p = std::make_shared<PeerSocket>();
  p->monitor_id = ++next_monitor_id_;
  std::unique_ptr<PeerMonitor> monitor;
  {
    MutexLock peer_lock(p->mu);
    try {
      p->socket = zmq::socket_t(context_, zmq::socket_type::push);
      p->socket.set(zmq::sockopt::linger, options_.linger_ms);
      p->socket.set(zmq::sockopt::sndhwm, options_.send_hwm);
      // Off: the connect creates the queue at once, so a send before the TCP connection
      // is up queues instead of failing, and a reconnect keeps what is queued.
      p->socket.set(zmq::sockopt::immediate, false);
      p->socket.set(zmq::sockopt::reconnect_ivl, options_.reconnect_interval_ms);
      p->socket.set(zmq::sockopt::reconnect_ivl_max, options_.reconnect_interval_max_ms);
      set_curve_client(p->socket);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return aborted("zmq endpoint is shut down");
      return internal_error(fmt::format("zmq endpoint: cannot create a socket: {}", e.what()));
    }
    // Before connect(), so the monitor sees the first connection.
    auto attached = PeerMonitor::attach(context_, p->socket, peer_endpoint, p->monitor_id);
    if (!attached.ok()) return attached.status();
    monitor = std::move(attached).value();
    try {
      p->socket.connect(peer_endpoint);
    } catch (const zmq::error_t& e) {
      PeerMonitor::detach(p->socket);
      p->socket.close();
      if (e.num() == ETERM) return aborted("zmq endpoint is shut down");
      return invalid_argument(
          fmt::format("zmq endpoint: cannot connect to '{}': {}", peer_endpoint, e.what()));
    }
  }
  // Under peers_mu_: shutdown() sets shut_down_ under it before it stops the receive
  // thread, which takes every posted monitor on its way out, so none is left behind.
  post(MonitorCommand{p->monitor_id, std::move(monitor)});
  peers_.emplace(peer_endpoint, p);
  return p;
}

Status ZmqEndpoint::queue_frames(PeerSocket& peer, const std::string& peer_endpoint,
                                 const Multipart& frames) {
  if (peer.closed) return aborted("zmq endpoint: peer socket closed");
  auto flags = [&](size_t i) {
    return (i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none) |
           zmq::send_flags::dontwait;
  };
  try {
    if (!peer.socket.send(zmq::buffer(frames[0]), flags(0))) {
      return unavailable(fmt::format(
          "zmq endpoint: queue to {} is full ({} messages): the peer is not reading or not there",
          peer_endpoint, options_.send_hwm));
    }
    // Only the first frame can fail: ZeroMQ counts whole messages against the HWM
    // (pipe.cpp check_hwm: _msgs_written grows with a message's last frame) and a PUSH
    // socket takes the rest of a message once its first frame is in (lb.cpp has_out:
    // "if one part of the message was already written we can definitely write the
    // rest"). Were the pipe to die mid-message (only at close, which peer.mu excludes),
    // lb.cpp rolls the message back and drops its remaining frames; sending them anyway
    // leaves the socket ready for the next message.
    bool whole = true;
    for (size_t i = 1; i < frames.size(); ++i) {
      if (!peer.socket.send(zmq::buffer(frames[i]), flags(i))) whole = false;
    }
    if (!whole) {
      return unavailable(fmt::format("zmq endpoint: {} dropped a message mid-way", peer_endpoint));
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == ETERM) return aborted("zmq endpoint is shut down");
    return unavailable(fmt::format("zmq endpoint: send to {} failed: {}", peer_endpoint, e.what()));
  }
  return Status();
}

Status ZmqEndpoint::send(const std::string& peer_endpoint, const Message& message) {
  return send_frames(peer_endpoint, encode_message(message));
}

Status ZmqEndpoint::send_once(const std::string& peer_endpoint, const Message& message) {
  {
    MutexLock lock(once_mu_);
    const auto t = std::chrono::steady_clock::now();
    if (t - once_window_ >= std::chrono::seconds(1)) {
      once_window_ = t;
      once_sent_ = 0;
    }
    if (once_sent_ >= kOncePerSecond) {
      once_dropped_.fetch_add(1, std::memory_order_relaxed);
      return unavailable(
          fmt::format("zmq endpoint: more than {} one-off sends this second", kOncePerSecond));
    }
    ++once_sent_;
  }
  {
    MutexLock lock(peers_mu_);
    if (shut_down_) return aborted("zmq endpoint is shut down");
  }
  const Multipart frames = encode_message(message);
  try {
    zmq::socket_t socket(context_, zmq::socket_type::push);
    socket.set(zmq::sockopt::linger, kOnceLingerMs);
    socket.set(zmq::sockopt::immediate, false);
    set_curve_client(socket);
    socket.connect(peer_endpoint);
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket.send(zmq::buffer(frames[i]), more | zmq::send_flags::dontwait)) {
        send_failures_.fetch_add(1, std::memory_order_relaxed);
        return unavailable("zmq endpoint: one-off send to " + peer_endpoint + " not queued");
      }
    }
  } catch (const zmq::error_t& e) {
    send_failures_.fetch_add(1, std::memory_order_relaxed);
    if (e.num() == ETERM) return aborted("zmq endpoint is shut down");
    if (e.num() == EMFILE) {
      return unavailable(fmt::format("zmq endpoint: no socket left for a one-off send to {}: {}",
                                     peer_endpoint, e.what()));
    }
    return invalid_argument(
        fmt::format("zmq endpoint: one-off send to '{}': {}", peer_endpoint, e.what()));
  }
  sent_.fetch_add(1, std::memory_order_relaxed);
  return Status();
}

Status ZmqEndpoint::send_frames(const std::string& peer_endpoint, const Multipart& frames) {
  Status st;
  if (frames.empty()) {
    st = invalid_argument("zmq endpoint: no frames to send");
  } else if (auto p = peer_socket(peer_endpoint); !p.ok()) {
    st = p.status();
  } else {
    PeerSocket& peer = **p;
    MutexLock lock(peer.mu);
    st = queue_frames(peer, peer_endpoint, frames);
  }
  (st.ok() ? sent_ : send_failures_).fetch_add(1, std::memory_order_relaxed);
  return st;
}

Result<size_t> ZmqEndpoint::send_burst(const std::string& peer_endpoint,
                                       std::span<const Message> messages) {
  if (messages.empty()) return size_t{0};
  std::vector<Multipart> encoded;
  encoded.reserve(messages.size());
  for (const Message& m : messages) encoded.push_back(encode_message(m));
  size_t queued = 0;
  Status first_error;
  if (auto p = peer_socket(peer_endpoint); !p.ok()) {
    first_error = p.status();
  } else {
    PeerSocket& peer = **p;
    MutexLock lock(peer.mu);
    for (const Multipart& frames : encoded) {
      first_error = queue_frames(peer, peer_endpoint, frames);
      if (!first_error.ok()) break;
      ++queued;
    }
  }
  sent_.fetch_add(queued, std::memory_order_relaxed);
  send_failures_.fetch_add(messages.size() - queued, std::memory_order_relaxed);
  if (queued == 0 && !first_error.ok() && first_error.code() != StatusCode::kUnavailable) {
    return first_error;
  }
  return queued;
}

void ZmqEndpoint::close_peer(PeerSocket& peer) {
  {
    MutexLock lock(peer.mu);
    if (peer.closed) return;
    PeerMonitor::detach(peer.socket);
    peer.socket.close();
    peer.closed = true;
  }
  post(MonitorCommand{peer.monitor_id, nullptr});
}

Status ZmqEndpoint::connect(const std::string& peer_endpoint) {
  return peer_socket(peer_endpoint).status();
}

void ZmqEndpoint::forget_peer(const std::string& peer_endpoint) {
  std::shared_ptr<PeerSocket> p;
  {
    MutexLock lock(peers_mu_);
    auto it = peers_.find(peer_endpoint);
    if (it == peers_.end()) return;
    p = std::move(it->second);
    peers_.erase(it);
  }
  close_peer(*p);
}

void ZmqEndpoint::post(MonitorCommand command) {
  {
    MutexLock lock(control_mu_);
    commands_.push_back(std::move(command));
  }
  wake();
}

void ZmqEndpoint::wake() {
  uint64_t one = 1;
  // Fails only if the counter would overflow, i.e. the thread is already woken.
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

bool ZmqEndpoint::is_current_monitor(const std::string& peer_endpoint, uint64_t id) {
  MutexLock lock(peers_mu_);
  auto it = peers_.find(peer_endpoint);
  return it != peers_.end() && it->second->monitor_id == id;
}

EndpointStats ZmqEndpoint::stats() const {
  EndpointStats s;
  s.received = received_.load();
  s.malformed = malformed_.load();
  s.handler_errors = handler_errors_.load();
  s.sent = sent_.load();
  s.send_failures = send_failures_.load();
  s.urgent = urgent_.load();
  s.drained_batches = drained_batches_.load();
  s.disconnects = disconnects_.load();
  s.peers_gone = peers_gone_.load();
  s.auth_refused = zap_ ? zap_->refused() : 0;
  s.auth_failed = auth_failed_.load();
  s.peers_over_cap = peers_over_cap_.load();
  s.once_dropped = once_dropped_.load();
  return s;
}

void ZmqEndpoint::shutdown() {
  std::map<std::string, std::shared_ptr<PeerSocket>> peers;
  {
    MutexLock lock(peers_mu_);
    if (shut_down_) return;
    shut_down_ = true;
    peers.swap(peers_);
  }
  for (auto& [name, p] : peers) {
    {
      // What was queued just before (a prefill's last statuses, then its shutdown) gets
      // a moment to leave instead of being dropped with the socket.
      MutexLock lock(p->mu);
      if (!p->closed) p->socket.set(zmq::sockopt::linger, kShutdownLingerMs);
    }
    close_peer(*p);  // a send in flight holds it for microseconds
  }
  stopping_.store(true);
  if (receiver_.joinable()) {
    wake();
    receiver_.join();  // it closes the monitors and pull_ on its way out
  } else {
    pull_.close();  // start() failed before the thread existed
  }
  if (zap_) {
    context_.shutdown();  // wakes the ZAP thread, which closes its socket and leaves
    zap_.reset();
  }
  context_.close();
}

}  // namespace pdkv::proto
