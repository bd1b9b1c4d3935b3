// ControlChannel: how a KV manager sends control-plane messages, and the factory that
// makes one. The managers only see this interface; the production channel is ZeroMQ
// (kv/control/zmq_control_channel.h over proto/zmq_endpoint.h), tests may use an in-process one.
//
// Contract:
//  * Messages from one sender to one peer arrive in order (ZeroMQ PUSH/PULL keeps
//    per-pipe order, which the protocol relies on: a registration goes ahead of the
//    pre-allocations that need it).
//  * Sends never block: a message is queued (OK, which is not delivery) or refused at once
//    (Unavailable: the peer's bounded queue is full; Aborted after stop()). A peer that is
//    not connected yet still gets what was queued once it connects. So a manager may send
//    from any thread, but never under its own lock (the managers mark their send paths
//    PDKV_EXCLUDES(mu_)).
//  * on_message runs on the channel's receive thread, one message at a time; messages
//    that arrived together are handed over urgent ones first (Ping, Pong: liveness never
//    waits behind a backlog). It must not block on data-plane work.
//  * on_peer_gone (optional) runs on the same thread when the connection to a peer this
//    channel sends to closed and reconnecting was refused: that peer's process is gone.
//    A peer that goes silent without closing (a cut link, a dead host) is not reported:
//    the managers' heartbeats catch it.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "proto/messages.h"

namespace pdkv::kv {

using MessageHandler = std::function<void(proto::Message message)>;
using PeerGoneHandler = std::function<void(const std::string& peer_endpoint)>;

// The peer refused (or broke) the security handshake of our connection to it: the
// cluster secrets differ, or only one side has one (docs/SECURITY.md).
using PeerRefusedHandler = std::function<void(const std::string& peer_endpoint)>;

struct ChannelCallbacks {
  MessageHandler on_message;
  PeerGoneHandler on_peer_gone{};        // may be empty
  PeerRefusedHandler on_peer_refused{};  // may be empty; same thread as on_message
};

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  // Where peers send to this channel, e.g. "tcp://10.0.0.5:41234".
  virtual const std::string& endpoint() const = 0;
  // Thread-safe; never blocks (see above).
  virtual Status send(const std::string& peer_endpoint, const proto::Message& message) = 0;
  // Queues `messages` to one peer in order, in one go; returns how many were queued (a
  // prefix: the rest found the queue full). Thread-safe; never blocks.
  virtual Result<size_t> send_burst(const std::string& peer_endpoint,
                                    std::span<const proto::Message> messages) = 0;
  // Sends one message without keeping anything for the peer afterwards (no socket stays
  // open): for answering a peer this rank refuses to serve. Rate-limited by the channel;
  // kUnavailable when over it. Thread-safe; never blocks.
  virtual Status send_once(const std::string& peer_endpoint, const proto::Message& message) {
    return send(peer_endpoint, message);
  }
  // Starts connecting to a peer this rank will send to soon, so the first message does
  // not wait for (or, at a shutdown right after, die with) a connection still being made.
  virtual void connect(const std::string& peer_endpoint) { (void)peer_endpoint; }
  // Drops what the channel holds for a peer this rank is done with (its socket and
  // queue); a later send() connects anew. Thread-safe.
  virtual void forget(const std::string& peer_endpoint) { (void)peer_endpoint; }
  // Stops the receive thread (joins it; no callback runs after this) and makes later
  // sends fail with Aborted. Idempotent; must not be called from a callback.
  virtual void stop() = 0;
};

// Binds a channel on `host` (any free port) whose receive thread runs `callbacks`.
using ControlChannelFactory = std::function<Result<std::unique_ptr<ControlChannel>>(
    const std::string& host, ChannelCallbacks callbacks)>;

}  // namespace pdkv::kv
