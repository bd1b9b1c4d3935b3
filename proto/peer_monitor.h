// Peer-process death detection from ZeroMQ socket monitor events (ZmqEndpoint's
// on_peer_gone).
//
// PeerLinkState is the pure rule: which sequence of ZMQ_EVENT_* on one per-peer PUSH
// socket means "the peer's process is gone". PeerMonitor attaches a monitor to such a
// socket and reads its events through an inproc PAIR socket.
//
// What libzmq 4.3.4 emits on loopback (measured with RECONNECT_IVL 50 ms, all events on;
// each retry waits RECONNECT_IVL plus a random 0..RECONNECT_IVL, so 50-100 ms):
//   first contact     CONNECT_DELAYED(EINPROGRESS), CONNECTED, HANDSHAKE_SUCCEEDED
//   kill -9 of peer   DISCONNECTED, CONNECT_RETRIED(~80 ms), then per failed attempt
//                     CONNECT_DELAYED, CLOSED, CONNECT_RETRIED: the first CLOSED came
//                     ~85 ms after the kill (the kernel answers the SYN with a reset)
//   reset, peer alive DISCONNECTED, CONNECT_RETRIED, CONNECT_DELAYED, CONNECTED,
//                     HANDSHAKE_SUCCEEDED (the peer's listener still accepts)
//   restart, same port  the kill sequence until the new process listens, then
//                     CONNECT_DELAYED, CONNECTED, HANDSHAKE_SUCCEEDED
//   never listened    CONNECT_DELAYED, CLOSED, CONNECT_RETRIED, repeated, no DISCONNECTED
//   SIGSTOPped peer   nothing (the kernel keeps the connection and accepts new ones)
// CLOSED is emitted only by the connecter, when it closes a socket whose connect failed
// (stream_connecter_base.cpp); a successful connect hands the socket to the engine and
// emits CONNECTED instead. So: gone = an established connection closed (DISCONNECTED)
// and the next connect attempt failed (CLOSED) before any new CONNECTED. A live process
// keeps its listener, so its reconnect succeeds; a saturated host still completes the
// TCP handshake in the kernel. A connect that fails fast for another reason (host
// unreachable) also counts as gone; one that hangs (a cut link) is left to heartbeats.
//
// Thread safety: PeerLinkState is a plain value. attach()/detach() need the PUSH socket's
// owner (its lock); a PeerMonitor's other methods are used by one thread at a time (the
// receive thread, after a hand-off through a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "common/status.h"

namespace pdkv::proto {

// The events PeerLinkState needs; the monitor asks for nothing else, so a peer that
// never answers costs one event per failed connect attempt.
inline constexpr int kPeerMonitorEvents = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED |
                                          ZMQ_EVENT_CLOSED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                          ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                          ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

class PeerLinkState {
 public:
  // Feeds one ZMQ_EVENT_* value. Returns true exactly when this event shows the peer's
  // process gone; after that it stays quiet until a new CONNECTED re-arms it (a process
  // restarted at the same port), so each established connection is reported at most once.
  bool on_event(uint16_t event);
  bool gone() const { return phase_ == Phase::kGone; }

 private:
  enum class Phase { kNeverConnected, kConnected, kReconnecting, kGone };
  Phase phase_ = Phase::kNeverConnected;
};

class PeerMonitor {
 public:
  struct Observed {
    uint32_t disconnects = 0;    // DISCONNECTED events read
    bool gone = false;           // PeerLinkState fired on one of them
    uint32_t auth_failures = 0;  // security handshakes the peer refused or broke
  };

  // Starts a monitor on `push` (inproc://pdkv-peer-monitor-<id>, unique per context) and
  // connects a PAIR socket to it, so events queue from now on. Call it before
  // push.connect(), or the first events are lost. REQUIRES: the caller owns `push`.
  // kInternal if ZeroMQ refuses (e.g. out of file descriptors).
  static Result<std::unique_ptr<PeerMonitor>> attach(zmq::context_t& context, zmq::socket_t& push,
                                                     std::string peer_endpoint, uint64_t id);
  // Stops the monitor of `push` at once (no event is sent after it returns). Call it
  // before closing `push`. REQUIRES: the caller owns `push`.
  static void detach(zmq::socket_t& push);

  ~PeerMonitor();  // closes the PAIR socket (linger 0: pending events are dropped)
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  // The PAIR socket, to poll for ZMQ_POLLIN.
  zmq::socket_t& socket() { return pair_; }
  uint64_t id() const { return id_; }
  const std::string& peer_endpoint() const { return peer_endpoint_; }

  // Reads every event already queued, without blocking.
  Observed read_events();

 private:
  PeerMonitor(zmq::socket_t pair, std::string peer_endpoint, uint64_t id);

  zmq::socket_t pair_;
  const std::string peer_endpoint_;
  const uint64_t id_;
  PeerLinkState state_;
};

}  // namespace pdkv::proto
