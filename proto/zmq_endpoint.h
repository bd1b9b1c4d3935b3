// ZmqEndpoint: one rank's control-plane socket set (the KV managers' only ZeroMQ user).
//
// - One PULL socket, bound to tcp://<bind_host>:* and read back through ZMQ_LAST_ENDPOINT,
//   so there is no "bind port 0, close, rebind" race (the reference's).
// - One PUSH socket per peer endpoint, created on first send and cached, each behind its
//   own mutex, so senders to different peers never wait for each other and a socket is
//   never used by two threads at once (the reference shared them unlocked).
//   Sends never block (ZMQ_DONTWAIT): a message is queued or the call fails at once.
//   ZMQ_IMMEDIATE is off, so a message sent before the TCP connection is up waits in the
//   socket's queue and leaves once connected (first contact does not fail); a full queue
//   (send_hwm messages: the peer is not reading, or is not there) is kUnavailable.
//   Nothing retries: the caller (a KV manager) decides.
// - One receive thread (owned here, "the receive thread" below). It waits in zmq_poll on
//   the PULL socket, the per-peer monitor sockets and an eventfd that wakes it for a new
//   monitor or shutdown (no periodic tick). It drains the messages already queued (up to
//   drain_batch per read, again between handler calls, at most send_hwm held decoded),
//   decodes them (codec.h) and calls the handler first for urgent ones (is_urgent:
//   Ping, Pong), then on_peer_gone reports, then the rest in arrival order; so a ping
//   waits for one handler call, not behind a backlog (and messages a dead peer sent
//   before dying may be handled after its report). A malformed message is logged with
//   the peer address and the reason, counted and dropped; a handler's error or exception
//   is logged and counted. Neither stops the thread.
// - Peer-process death: a monitor on every PUSH socket (peer_monitor.h) reports a peer
//   whose established connection closed and whose reconnect was then refused: its
//   process is gone. Reported once per connection, on the receive thread, about one
//   reconnect interval (50-100 ms) after the death. A peer that never accepted a
//   connection, one whose connection was reset while it lives, or a stopped (SIGSTOP)
//   one is never reported: silence stays the callers' (heartbeat) business.
// - One zmq::context_t per endpoint, shared by its sockets; shutdown() terminates it.
// - With a cluster secret (EndpointOptions::cluster_key) every connection is CURVE:
//   authenticated both ways and encrypted; a client that cannot prove the secret is
//   refused by the ZAP handler (zap_authenticator.h) before any of its messages is
//   read, and counted (stats().auth_refused). A handshake a peer refuses is logged
//   (rate-limited) and counted (auth_failed): its messages stay queued, undelivered.
//
// Thread safety: send(), send_burst(), send_frames(), send_once(), connect(),
// forget_peer(), stats() and endpoint() may be called from any thread, concurrently, including from
// the handler and on_peer_gone. Those two run only on the receive thread, one call at a time, never
// concurrently with each other, and must not call shutdown() (it would wait for itself).
// shutdown() (also run by the destructor) is idempotent: it closes every socket (giving
// what is still queued kShutdownLingerMs to leave), wakes and joins the receive thread and
// terminates the context; later sends return kAborted.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "proto/codec.h"
#include "proto/zmq_endpoint_options.h"
#include "proto/zmq_socket_budget.h"

namespace pdkv::proto {

class PeerMonitor;
class ZapAuthenticator;

// Messages the receive thread hands to the handler before any other it holds: the
// liveness probe and its answer (Ping, Pong).
bool is_urgent(const Message& message);

class ZmqEndpoint {
 public:
  // `peer` is the sender's TCP address as ZeroMQ reports it ("127.0.0.1"), for logs.
  using Handler = std::function<Status(Message&& message, const std::string& peer)>;
  // `peer_endpoint` is the string that was passed to send() ("tcp://host:port").
  using PeerGoneHandler = std::function<void(const std::string& peer_endpoint)>;
  // A peer refused (or broke) the security handshake of our connection to it: with CURVE
  // that means the cluster secrets differ, or only one side has one. Reported on the
  // receive thread each time the monitor saw such failures (every reconnect attempt).
  using PeerRefusedHandler = std::function<void(const std::string& peer_endpoint)>;

  // Binds and starts the receive thread. kUnavailable if the bind fails,
  // kInvalidArgument if drain_batch, send_hwm or reconnect_interval_ms is not positive.
  // on_peer_gone / on_peer_refused may be null (the event is then only counted and logged).
  static Result<std::unique_ptr<ZmqEndpoint>> start(const EndpointOptions& options, Handler handler,
                                                    PeerGoneHandler on_peer_gone = nullptr,
                                                    PeerRefusedHandler on_peer_refused = nullptr);
  ~ZmqEndpoint();
  ZmqEndpoint(const ZmqEndpoint&) = delete;
  ZmqEndpoint& operator=(const ZmqEndpoint&) = delete;

  // "tcp://host:port": what peers send to (RankIdentity::control_endpoint).
  const std::string& endpoint() const { return endpoint_; }

  // Queues one message to `peer_endpoint` ("tcp://host:port") without blocking. OK once
  // ZeroMQ queued it (not delivery! a peer that is not connected yet gets it once it
  // is); kUnavailable at once if the peer's queue is full (send_hwm messages: it is not
  // reading or not there); kAborted after shutdown or forget_peer() racing this call;
  // kInvalidArgument for an endpoint ZeroMQ rejects; kInternal if the socket's monitor
  // cannot be created. A multipart message is queued whole or not at all.
  Status send(const std::string& peer_endpoint, const Message& message);
  // Encodes every message, then queues them in order under one lock of the peer's socket
  // until the queue is full. Returns how many were queued: always a prefix of
  // `messages`, possibly 0 (queue full). An error only if none was queued for another
  // reason (the codes of send()).
  Result<size_t> send_burst(const std::string& peer_endpoint, std::span<const Message> messages);
  // Sends one message on a socket of its own that is closed at once (ZeroMQ still
  // delivers it for up to kOnceLingerMs): for answering a peer this endpoint will not keep a
  // socket for, such as one refused for a cap. At most kOncePerSecond a second; more are
  // dropped with kUnavailable (a flood of refusals must not become a flood of sockets).
  Status send_once(const std::string& peer_endpoint, const Message& message);
  static constexpr int kOncePerSecond = kOneOffSocketsPerSecond;
  // Short: closing the endpoint waits this long for an undelivered one.
  static constexpr int kOnceLingerMs = 250;
  // How long shutdown() lets messages still queued to peers leave (a gone peer's are
  // dropped after it).
  static constexpr int kShutdownLingerMs = 250;
  // send() for pre-encoded frames (tests use it to send malformed input).
  Status send_frames(const std::string& peer_endpoint, const Multipart& frames);

  // Creates (and starts connecting) the cached socket of a peer without sending: errors
  // as send().
  Status connect(const std::string& peer_endpoint);
  // Closes the cached socket of a peer (e.g. declared dead), dropping what it still
  // queues, and its monitor (no on_peer_gone for it after this returns, unless the
  // receive thread is already reporting it); the next send connects again. Without it
  // a gone peer's socket stays, retrying every reconnect_interval_max_ms and queueing
  // up to send_hwm messages for a process restarted at the same port (then watched
  // again); call it from on_peer_gone to drop them instead.
  void forget_peer(const std::string& peer_endpoint);

  EndpointStats stats() const;
  void shutdown();

 private:
  struct PeerSocket {
    uint64_t monitor_id = 0;  // immutable once the socket is in peers_
    Mutex mu;
    zmq::socket_t socket PDKV_GUARDED_BY(mu);
    bool closed PDKV_GUARDED_BY(mu) = false;
  };
  // A monitor handed to the receive thread (monitor set) or taken back (monitor null).
  struct MonitorCommand {
    uint64_t id = 0;
    std::unique_ptr<PeerMonitor> monitor;
  };
  class ReceiveLoop;  // the receive thread's state (zmq_endpoint_receive.cc)

  ZmqEndpoint(const EndpointOptions& options, Handler handler, PeerGoneHandler on_peer_gone,
              PeerRefusedHandler on_peer_refused);
  void receive_loop();  // the receive thread's body (zmq_endpoint_receive.cc)
  Result<std::shared_ptr<PeerSocket>> peer_socket(const std::string& peer_endpoint)
      PDKV_EXCLUDES(peers_mu_);
  // With a cluster secret: makes `socket` a CURVE client of the members' server key.
  void set_curve_client(zmq::socket_t& socket) const;
  // Queues one encoded message without blocking.
  Status queue_frames(PeerSocket& peer, const std::string& peer_endpoint, const Multipart& frames)
      PDKV_REQUIRES(peer.mu);
  void close_peer(PeerSocket& peer) PDKV_EXCLUDES(peer.mu, control_mu_);
  void post(MonitorCommand command) PDKV_EXCLUDES(control_mu_);
  void wake();
  // True if the monitor `id` still belongs to the cached socket of `peer_endpoint`.
  bool is_current_monitor(const std::string& peer_endpoint, uint64_t id) PDKV_EXCLUDES(peers_mu_);

  const EndpointOptions options_;
  const Handler handler_;
  const PeerGoneHandler on_peer_gone_;
  const PeerRefusedHandler on_peer_refused_;
  zmq::context_t context_;
  // With a cluster secret (EndpointOptions::cluster_key): the context's ZAP handler and
  // the CURVE key pairs every member derives alike. Set by start(), then read-only.
  std::unique_ptr<ZapAuthenticator> zap_;
  ClusterKey::CurvePair curve_server_, curve_client_;
  zmq::socket_t pull_;  // used by the receive thread only once it started
  std::string endpoint_;
  int wake_fd_ = -1;  // eventfd, set by start(): written by any thread, read by the receive one
  std::thread receiver_;
  std::atomic<bool> stopping_{false};

  Mutex peers_mu_;  // guards the cache, not the sockets (each has its own mutex)
  std::map<std::string, std::shared_ptr<PeerSocket>> peers_ PDKV_GUARDED_BY(peers_mu_);
  size_t max_peers_ = 0;  // set by start()
  std::atomic<uint64_t> peers_over_cap_{0};
  // send_once()'s rate: calls in the current one-second window.
  Mutex once_mu_;
  std::chrono::steady_clock::time_point once_window_ PDKV_GUARDED_BY(once_mu_);
  int once_sent_ PDKV_GUARDED_BY(once_mu_) = 0;
  std::atomic<uint64_t> once_dropped_{0};
  bool shut_down_ PDKV_GUARDED_BY(peers_mu_) = false;
  uint64_t next_monitor_id_ PDKV_GUARDED_BY(peers_mu_) = 0;

  Mutex control_mu_;  // lock order: peers_mu_ before control_mu_
  std::vector<MonitorCommand> commands_ PDKV_GUARDED_BY(control_mu_);

  std::atomic<uint64_t> received_{0}, malformed_{0}, handler_errors_{0}, sent_{0},
      send_failures_{0}, urgent_{0}, drained_batches_{0}, disconnects_{0}, peers_gone_{0},
      auth_failed_{0};
};

}  // namespace pdkv::proto
