#include "engine/path/path_channel.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/logging.h"
#include "engine/lease/lease_auth.h"
#include "engine/session_auth.h"

namespace pdkv::engine {

// Hellos are a few hundred bytes (eight offers of bounded names).
constexpr uint32_t kMaxPathPayloadBytes = 16u << 10;

PathServer::PathServer(PathServerOptions options, HelloSource hello, ChoiceSink sink)
    : options_(std::move(options)), hello_(std::move(hello)), sink_(std::move(sink)) {}

PathServer::~PathServer() {
  stopping_.store(true);
  listener_.shutdown_both();
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::unique_ptr<Conn>> conns;
  {
    MutexLock lock(conns_mu_);
    conns.swap(conns_);
  }
  for (auto& c : conns) c->sock.shutdown_both();
  for (auto& c : conns) c->thread.join();
}

Result<std::string> PathServer::listen(const std::string& host, int port) {
  PDKV_ASSIGN_OR_RETURN(std::string endpoint, bind(host, port));
  start();
  return endpoint;
}

Result<std::string> PathServer::bind(const std::string& host, int port) {
  int bound = 0;
  PDKV_ASSIGN_OR_RETURN(listener_, lease::listen_on(host, port, &bound));
  return host + ":" + std::to_string(bound);
}

void PathServer::start() { acceptor_ = std::thread([this] { accept_loop(); }); }

void PathServer::accept_loop() {
  while (!stopping_.load()) {
    pollfd p{listener_.fd(), POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    lease::set_nodelay(fd);
    MutexLock lock(conns_mu_);
    for (size_t i = 0; i < conns_.size();) {
      if (conns_[i]->finished.load()) {
        conns_[i]->thread.join();
        conns_[i] = std::move(conns_.back());
        conns_.pop_back();
      } else {
        ++i;
      }
    }
    if (conns_.size() >= static_cast<size_t>(options_.max_connections)) {
      PDKV_LOG_WARN_LIMITED("path channel: {} handshakes in progress, closing a new connection",
                            conns_.size());
      lease::Socket drop(fd);
      continue;
    }
    auto conn = std::make_unique<Conn>();
    conn->sock = lease::Socket(fd);
    Conn* raw = conn.get();
    conn->thread = std::thread([this, raw] { serve(raw); });
    conns_.push_back(std::move(conn));
  }
}

void PathServer::serve(Conn* conn) {
  Status st = exchange(conn->sock);
  if (!st.ok() && st.code() != StatusCode::kUnavailable && !stopping_.load()) {
    PDKV_LOG_WARN_LIMITED("path channel: closing a connection: {}", st.to_string());
  }
  conn->sock.shutdown_both();
  conn->finished.store(true);
}

Status PathServer::exchange(lease::Socket& sock) {
  const int step_ms = options_.step_timeout_ms;
  if (options_.cluster_key) {
    PDKV_RETURN_IF_ERROR(
        lease::authenticate_lease_client(sock, *options_.cluster_key, step_ms, kPathChannel));
  }
  lease::MsgType type{};
  std::vector<uint8_t> payload;
  PDKV_RETURN_IF_ERROR(
      sock.recv_frame(&type, &payload, now() + Millis(step_ms), kMaxPathPayloadBytes));
  if (type == lease::MsgType::kAuthHello) {  // reached only without a secret
    lease::send_refusal(sock,
                        "this engine has no cluster secret but the sender authenticates (" +
                            std::string(kSecretMismatchHint) + ")",
                        step_ms);
    return unauthenticated("a sender authenticates but this engine has no cluster secret");
  }
  if (type != lease::MsgType::kPathHello) {
    return data_loss("path channel: first message of type " +
                     std::to_string(static_cast<int>(type)) + ", not a path hello");
  }
  PDKV_ASSIGN_OR_RETURN(PathHello peer, decode_path_hello(payload));
  // The proof slot: the sender reads it from its own process while we wait for its
  // choice, so it lives on this thread's stack until then.
  LocalityChallenge slot = peer.challenge;
  PathHello mine = hello_();
  mine.challenge = slot;
  mine.proof_addr = reinterpret_cast<uint64_t>(slot.data());
  payload.clear();
  encode_path_hello(mine, &payload);
  PDKV_RETURN_IF_ERROR(
      sock.send_frame(lease::MsgType::kPathHello, payload, now() + Millis(step_ms)));
  PDKV_RETURN_IF_ERROR(
      sock.recv_frame(&type, &payload, now() + Millis(step_ms), kMaxPathPayloadBytes));
  // Keep the slot observable until here (the compiler may not drop the copy above).
  asm volatile("" : : "r"(slot.data()) : "memory");
  if (type != lease::MsgType::kPathChoice) {
    return data_loss("path channel: expected the sender's choice, got type " +
                     std::to_string(static_cast<int>(type)));
  }
  PDKV_ASSIGN_OR_RETURN(PathChoice choice, decode_path_choice(payload));
  sink_(peer, choice);
  return Status();
}

Result<PathHello> PathClient::exchange(const std::string& endpoint, const PathHello& mine,
                                       const ClusterKey* key, int timeout_ms) {
  PDKV_ASSIGN_OR_RETURN(sock_, lease::connect_to(endpoint, timeout_ms));
  lease::set_nodelay(sock_.fd());
  if (key != nullptr) {
    PDKV_RETURN_IF_ERROR(lease::authenticate_to_lease_server(sock_, *key, timeout_ms, kPathChannel)
                             .with_context(endpoint));
  }
  std::vector<uint8_t> payload;
  encode_path_hello(mine, &payload);
  PDKV_RETURN_IF_ERROR(
      sock_.send_frame(lease::MsgType::kPathHello, payload, now() + Millis(timeout_ms)));
  lease::MsgType type{};
  Status st = sock_.recv_frame(&type, &payload, now() + Millis(timeout_ms), kMaxPathPayloadBytes);
  if (!st.ok()) {
    return Status(st.code(), endpoint + ": no answer on the path channel (" + st.message() +
                                 "); an engine with a fixed PDKV_ENGINE_BACKEND does not speak "
                                 "it: run every engine of the cluster with the same setting");
  }
  if (type == lease::MsgType::kAuthRefused) {
    return lease::refused_by_peer(payload).with_context(endpoint);
  }
  if (type != lease::MsgType::kPathHello) {
    return data_loss(endpoint + ": answered the path hello with message type " +
                     std::to_string(static_cast<int>(type)));
  }
  PDKV_ASSIGN_OR_RETURN(PathHello peer, decode_path_hello(payload));
  return peer;
}

void PathClient::finish(const PathChoice& choice, int timeout_ms) {
  std::vector<uint8_t> payload;
  encode_path_choice(choice, &payload);
  (void)sock_.send_frame(lease::MsgType::kPathChoice, payload, now() + Millis(timeout_ms));
  sock_.shutdown_both();
}

}  // namespace pdkv::engine
