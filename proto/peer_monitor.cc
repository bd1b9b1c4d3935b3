#include "proto/peer_monitor.h"

#include <fmt/format.h>

#include <cstring>

#include "common/logging.h"

namespace pdkv::proto {

bool PeerLinkState::on_event(uint16_t event) {
  switch (event) {
    case ZMQ_EVENT_CONNECTED:
      phase_ = Phase::kConnected;  // also re-arms after kGone
      return false;
    case ZMQ_EVENT_DISCONNECTED:
      if (phase_ == Phase::kConnected) phase_ = Phase::kReconnecting;
      return false;
    case ZMQ_EVENT_CLOSED:
      // Before any connection (kNeverConnected) this is a peer that never answered: not
      // reported, its sends simply queue.
      if (phase_ != Phase::kReconnecting) return false;
      phase_ = Phase::kGone;
      return true;
    default: return false;
  }
}

PeerMonitor::PeerMonitor(zmq::socket_t pair, std::string peer_endpoint, uint64_t id)
    : pair_(std::move(pair)), peer_endpoint_(std::move(peer_endpoint)), id_(id) {}

PeerMonitor::~PeerMonitor() { pair_.close(); }

Result<std::unique_ptr<PeerMonitor>> PeerMonitor::attach(zmq::context_t& context,
                                                         zmq::socket_t& push,
                                                         std::string peer_endpoint, uint64_t id) {
  std::string address = fmt::format("inproc://pdkv-peer-monitor-{}", id);
  if (zmq_socket_monitor(push.handle(), address.c_str(), kPeerMonitorEvents) != 0) {
    return internal_error(fmt::format("zmq endpoint: cannot monitor the socket to {}: {}",
                                      peer_endpoint, zmq_strerror(zmq_errno())));
  }
  try {
    zmq::socket_t pair(context, zmq::socket_type::pair);
    pair.set(zmq::sockopt::linger, 0);
    pair.connect(address);
    return std::unique_ptr<PeerMonitor>(
        new PeerMonitor(std::move(pair), std::move(peer_endpoint), id));
  } catch (const zmq::error_t& e) {
    detach(push);
    return internal_error(
        fmt::format("zmq endpoint: cannot read the monitor of {}: {}", peer_endpoint, e.what()));
  }
}

void PeerMonitor::detach(zmq::socket_t& push) {
  if (push.handle() != nullptr) (void)zmq_socket_monitor(push.handle(), nullptr, 0);
}

PeerMonitor::Observed PeerMonitor::read_events() {
  Observed seen;
  for (;;) {
    // An event is two frames: [u16 event, u32 value] in host byte order, then the
    // endpoint (socket_base.cpp monitor_event, version 1).
    zmq::message_t head, address;
    try {
      if (!pair_.recv(head, zmq::recv_flags::dontwait)) break;
      if (head.more() && !pair_.recv(address, zmq::recv_flags::dontwait)) break;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) break;  // ETERM at shutdown: the owner closes us next
      continue;
    }
    if (head.size() < sizeof(uint16_t)) continue;
    uint16_t event = 0;
    std::memcpy(&event, head.data(), sizeof(event));
    if (event == ZMQ_EVENT_DISCONNECTED) ++seen.disconnects;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
        event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      ++seen.auth_failures;
      PDKV_LOG_WARN_LIMITED(
          "control plane: the handshake with {} failed (event {:#x}): does it hold the same "
          "cluster secret (PDKV_SECRET_FILE)? Messages to it stay undelivered",
          peer_endpoint_, event);
    }
    if (state_.on_event(event)) seen.gone = true;
    PDKV_LOG_TRACE("zmq endpoint: monitor of {}: event {:#x}", peer_endpoint_, event);
  }
  return seen;
}

}  // namespace pdkv::proto
