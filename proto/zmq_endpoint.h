// ZmqEndpoint: one rank's control-plane socket set (the KV managers' only ZeroMQ user).
//
// - One PULL socket, bound to tcp://<bind_host>:* and read back through ZMQ_LAST_ENDPOINT,
//   so there is no "bind port 0, close, rebind" race (SPEC §3.1, §12 item 20).
// - One receive thread (owned here, named "receive thread" below) that reads multipart
//   messages, decodes them (codec.h) and calls the handler. A malformed message is
//   logged with the peer address and the reason, counted and dropped; a handler's error
//   or exception is logged and counted. Neither stops the thread.
// - One PUSH socket per peer endpoint, created on first send and cached, each behind its
//   own mutex, so senders to different peers never wait for each other and a socket is
//   never used by two threads at once (the reference shared them unlocked, §12 item 11).
//   Sends are bounded: ZMQ_IMMEDIATE (queue only to connected peers), ZMQ_SNDHWM and
//   ZMQ_SNDTIMEO, so a dead or absent peer costs a caller at most send_timeout, then
//   kUnavailable. Nothing retries: the caller (a KV manager) decides.
// - One zmq::context_t per endpoint, shared by its sockets; shutdown() terminates it.
//
// Thread safety: send(), forget_peer(), stats() and endpoint() may be called from any
// thread, concurrently. The handler runs only on the receive thread, one message at a
// time, and must not call shutdown() (it would wait for itself); it may call send().
// shutdown() (also run by the destructor) is idempotent: it wakes and joins the receive
// thread, closes every socket and terminates the context; later sends return kAborted.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "proto/codec.h"

namespace pdkv::proto {

struct EndpointOptions {
  std::string bind_host = "127.0.0.1";
  // Host put into endpoint() for peers to connect to; empty = bind_host (set it when
  // binding a wildcard address such as 0.0.0.0).
  std::string advertise_host;
  int send_hwm = 1000;                          // messages queued per peer
  std::chrono::milliseconds send_timeout{200};  // longest a send may block
  int linger_ms = 0;                            // unsent messages at close are dropped
  size_t max_frames = 8;                        // more = malformed (drained, dropped)

  // PDKV_ZMQ_SEND_TIMEOUT_MS, PDKV_ZMQ_SNDHWM (docs/CONFIG.md); other fields default.
  static Result<EndpointOptions> from_env();
};

struct EndpointStats {
  uint64_t received = 0;        // decoded and handed to the handler
  uint64_t malformed = 0;       // dropped by the decoder
  uint64_t handler_errors = 0;  // handler returned an error or threw
  uint64_t sent = 0;
  uint64_t send_failures = 0;
};

class ZmqEndpoint {
 public:
  // `peer` is the sender's TCP address as ZeroMQ reports it ("127.0.0.1"), for logs.
  using Handler = std::function<Status(Message&& message, const std::string& peer)>;

  // Binds and starts the receive thread. kUnavailable if the bind fails.
  static Result<std::unique_ptr<ZmqEndpoint>> start(const EndpointOptions& options,
                                                    Handler handler);
  ~ZmqEndpoint();
  ZmqEndpoint(const ZmqEndpoint&) = delete;
  ZmqEndpoint& operator=(const ZmqEndpoint&) = delete;

  // "tcp://host:port": what peers send to (RankIdentity::control_endpoint).
  const std::string& endpoint() const { return endpoint_; }

  // Sends one message to `peer_endpoint` ("tcp://host:port"). Returns within about
  // send_timeout: OK once ZeroMQ queued it to a connected peer (not delivery!),
  // kUnavailable if the peer is not connected or its queue is full, kAborted after
  // shutdown, kInvalidArgument for an endpoint ZeroMQ rejects.
  Status send(const std::string& peer_endpoint, const Message& message);
  // Same for pre-encoded frames (tests use it to send malformed input).
  Status send_frames(const std::string& peer_endpoint, const Multipart& frames);

  // Closes the cached socket of a peer (e.g. declared dead); the next send reconnects.
  void forget_peer(const std::string& peer_endpoint);

  EndpointStats stats() const;
  void shutdown();

 private:
  struct PeerSocket {
    Mutex mu;
    zmq::socket_t socket PDKV_GUARDED_BY(mu);
    bool closed PDKV_GUARDED_BY(mu) = false;
  };

  ZmqEndpoint(const EndpointOptions& options, Handler handler);
  void receive_loop();  // the receive thread
  void dispatch(std::vector<zmq::message_t>& parts, bool too_many);
  Result<std::shared_ptr<PeerSocket>> peer_socket(const std::string& peer_endpoint)
      PDKV_EXCLUDES(peers_mu_);

  const EndpointOptions options_;
  const Handler handler_;
  zmq::context_t context_;
  zmq::socket_t pull_;  // used by the receive thread only once it started
  std::string endpoint_;
  std::thread receiver_;

  Mutex peers_mu_;  // guards the cache, not the sockets (each has its own mutex)
  std::map<std::string, std::shared_ptr<PeerSocket>> peers_ PDKV_GUARDED_BY(peers_mu_);
  bool shut_down_ PDKV_GUARDED_BY(peers_mu_) = false;

  std::atomic<uint64_t> received_{0}, malformed_{0}, handler_errors_{0}, sent_{0},
      send_failures_{0};
};

}  // namespace pdkv::proto
