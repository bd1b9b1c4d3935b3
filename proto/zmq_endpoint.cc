#include "proto/zmq_endpoint.h"

#include <fmt/format.h>

#include "common/config.h"
#include "common/logging.h"

namespace pdkv::proto {

Result<EndpointOptions> EndpointOptions::from_env() {
  EndpointOptions o;
  PDKV_ASSIGN_OR_RETURN(int64_t timeout_ms,
                        config::read_int("PDKV_ZMQ_SEND_TIMEOUT_MS", 200, 0, 60000));
  PDKV_ASSIGN_OR_RETURN(int64_t hwm, config::read_int("PDKV_ZMQ_SNDHWM", 1000, 1, 1000000));
  o.send_timeout = std::chrono::milliseconds(timeout_ms);
  o.send_hwm = static_cast<int>(hwm);
  return o;
}

ZmqEndpoint::ZmqEndpoint(const EndpointOptions& options, Handler handler)
    : options_(options), handler_(std::move(handler)), context_(1) {}

Result<std::unique_ptr<ZmqEndpoint>> ZmqEndpoint::start(const EndpointOptions& options,
                                                        Handler handler) {
  std::unique_ptr<ZmqEndpoint> ep(new ZmqEndpoint(options, std::move(handler)));
  try {
    ep->pull_ = zmq::socket_t(ep->context_, zmq::socket_type::pull);
    ep->pull_.set(zmq::sockopt::linger, options.linger_ms);
    ep->pull_.set(zmq::sockopt::rcvhwm, options.send_hwm);
    // A frame larger than any valid body makes ZeroMQ drop the connection before it
    // allocates the frame.
    ep->pull_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxBodyBytes + kHeaderBytes));
    ep->pull_.bind(fmt::format("tcp://{}:*", options.bind_host));
    std::string bound = ep->pull_.get(zmq::sockopt::last_endpoint);
    size_t colon = bound.rfind(':');
    std::string host = options.advertise_host.empty() ? options.bind_host : options.advertise_host;
    bool v6 = host.find(':') != std::string::npos && host.front() != '[';
    ep->endpoint_ =
        fmt::format("tcp://{}{}{}{}", v6 ? "[" : "", host, v6 ? "]" : "", bound.substr(colon));
  } catch (const zmq::error_t& e) {
    return unavailable(
        fmt::format("zmq endpoint: cannot bind tcp://{}:*: {}", options.bind_host, e.what()));
  }
  ZmqEndpoint* raw = ep.get();
  ep->receiver_ = std::thread([raw] { raw->receive_loop(); });
  PDKV_LOG_DEBUG("zmq endpoint: listening on {}", ep->endpoint_);
  return ep;
}

ZmqEndpoint::~ZmqEndpoint() { shutdown(); }

void ZmqEndpoint::receive_loop() {
  for (;;) {
    std::vector<zmq::message_t> parts;
    bool too_many = false;
    try {
      zmq::message_t first;
      if (!pull_.recv(first, zmq::recv_flags::none)) continue;
      bool more = first.more();
      parts.push_back(std::move(first));
      // The rest of a multipart message is already here (ZeroMQ delivers it atomically);
      // beyond max_frames it is drained and the message is dropped as malformed.
      while (more) {
        zmq::message_t part;
        if (!pull_.recv(part, zmq::recv_flags::none)) break;
        more = part.more();
        if (parts.size() < options_.max_frames) {
          parts.push_back(std::move(part));
        } else {
          too_many = true;
        }
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;  // shutdown()
      if (e.num() != EINTR)
        PDKV_LOG_WARN("zmq endpoint {}: receive failed: {}", endpoint_, e.what());
      continue;
    }
    dispatch(parts, too_many);
  }
  pull_.close();
}

void ZmqEndpoint::dispatch(std::vector<zmq::message_t>& parts, bool too_many) {
  std::string peer = "unknown peer";
  try {
    if (const char* addr = parts[0].gets("Peer-Address")) peer = addr;
  } catch (const zmq::error_t&) {
    // Not every transport reports it; the log just says "unknown peer".
  }
  Result<Message> msg = data_loss(fmt::format("more than {} frames", options_.max_frames));
  if (!too_many) {
    std::vector<std::string_view> views;
    views.reserve(parts.size());
    for (const auto& p : parts) views.emplace_back(p.data<char>(), p.size());
    msg = decode_message(views);
  }
  if (!msg.ok()) {
    malformed_.fetch_add(1, std::memory_order_relaxed);
    PDKV_LOG_WARN("zmq endpoint {}: dropped a malformed message from {}: {}", endpoint_, peer,
                  msg.status().message());
    return;
  }
  received_.fetch_add(1, std::memory_order_relaxed);
  Status st;
  try {
    st = handler_(std::move(msg).value(), peer);
  } catch (const std::exception& e) {
    st = internal_error(fmt::format("handler threw: {}", e.what()));
  } catch (...) {
    st = internal_error("handler threw a non-standard exception");
  }
  if (!st.ok()) {
    handler_errors_.fetch_add(1, std::memory_order_relaxed);
    PDKV_LOG_WARN("zmq endpoint {}: handler failed on a message from {}: {}", endpoint_, peer,
                  st.to_string());
  }
}

Result<std::shared_ptr<ZmqEndpoint::PeerSocket>> ZmqEndpoint::peer_socket(
    const std::string& peer_endpoint) {
  MutexLock lock(peers_mu_);
  if (shut_down_) return aborted("zmq endpoint is shut down");
  auto it = peers_.find(peer_endpoint);
  if (it != peers_.end()) return it->second;
  auto p = std::make_shared<PeerSocket>();
  try {
    MutexLock peer_lock(p->mu);
    p->socket = zmq::socket_t(context_, zmq::socket_type::push);
    p->socket.set(zmq::sockopt::linger, options_.linger_ms);
    p->socket.set(zmq::sockopt::sndhwm, options_.send_hwm);
    p->socket.set(zmq::sockopt::sndtimeo, static_cast<int>(options_.send_timeout.count()));
    p->socket.set(zmq::sockopt::immediate, true);
    p->socket.connect(peer_endpoint);
  } catch (const zmq::error_t& e) {
    if (e.num() == ETERM) return aborted("zmq endpoint is shut down");
    return invalid_argument(
        fmt::format("zmq endpoint: cannot connect to '{}': {}", peer_endpoint, e.what()));
  }
  peers_.emplace(peer_endpoint, p);
  return p;
}

Status ZmqEndpoint::send(const std::string& peer_endpoint, const Message& message) {
  return send_frames(peer_endpoint, encode_message(message));
}

Status ZmqEndpoint::send_frames(const std::string& peer_endpoint, const Multipart& frames) {
  auto fail = [this](Status s) {
    send_failures_.fetch_add(1, std::memory_order_relaxed);
    return s;
  };
  if (frames.empty()) return fail(invalid_argument("zmq endpoint: no frames to send"));
  auto p = peer_socket(peer_endpoint);
  if (!p.ok()) return fail(p.status());
  PeerSocket& peer = **p;
  MutexLock lock(peer.mu);
  if (peer.closed) return fail(aborted("zmq endpoint: peer socket closed"));
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      // Only the first part can time out: once it is queued ZeroMQ takes the rest.
      if (!peer.socket.send(zmq::buffer(frames[i]), flags)) {
        return fail(unavailable(
            fmt::format("zmq endpoint: {} not reachable within {} ms (not connected or queue full)",
                        peer_endpoint, options_.send_timeout.count())));
      }
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == ETERM) return fail(aborted("zmq endpoint is shut down"));
    return fail(
        unavailable(fmt::format("zmq endpoint: send to {} failed: {}", peer_endpoint, e.what())));
  }
  sent_.fetch_add(1, std::memory_order_relaxed);
  return Status();
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
  MutexLock lock(p->mu);
  p->socket.close();
  p->closed = true;
}

EndpointStats ZmqEndpoint::stats() const {
  return EndpointStats{received_.load(), malformed_.load(), handler_errors_.load(), sent_.load(),
                       send_failures_.load()};
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
    MutexLock lock(p->mu);  // waits for an in-flight send, at most send_timeout
    p->socket.close();
    p->closed = true;
  }
  context_.shutdown();  // the receive thread's blocking recv fails with ETERM
  if (receiver_.joinable()) {
    receiver_.join();  // it closes pull_ on its way out
  } else {
    pull_.close();  // start() failed before the thread existed
  }
  context_.close();
}

}  // namespace pdkv::proto
