// ZmqEndpoint's receive thread: one zmq_poll over the PULL socket, the eventfd and the
// peer monitors; drains, decodes and dispatches with urgent messages first.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <deque>

#include "common/logging.h"
#include "common/stage_cpu.h"
#include "proto/peer_monitor.h"
#include "proto/zmq_endpoint.h"

namespace pdkv::proto {
namespace {

// Messages handled between two zmq_polls when a backlog is held: bounds how long a new
// monitor event, forget_peer() or shutdown() waits behind slow handlers (urgent
// messages do not wait: the socket is drained again after every handler call).
constexpr size_t kHandledPerPoll = 32;

}  // namespace

class ZmqEndpoint::ReceiveLoop {
 public:
  explicit ReceiveLoop(ZmqEndpoint& ep)
      : ep_(ep),
        max_held_(std::max(static_cast<size_t>(ep.options_.send_hwm), ep.options_.drain_batch)) {}
  ~ReceiveLoop() { close_all(); }

  void run() {
    rebuild_poll_items();
    while (!ep_.stopping_.load()) {
      bool held = !urgent_.empty() || !normal_.empty();
      if (zmq_poll(items_.data(), static_cast<int>(items_.size()), held ? 0 : -1) < 0) {
        int err = zmq_errno();
        if (err == ETERM) return;
        if (err != EINTR)
          PDKV_LOG_WARN("zmq endpoint {}: poll failed: {}", ep_.endpoint_, zmq_strerror(err));
        continue;
      }
      const StageCpuScope cpu(CpuStage::kControl);
      // Monitors before commands: a command may remove a monitor and reorder items_.
      for (size_t i = kFirstMonitor; i < items_.size(); ++i) {
        if (items_[i].revents & ZMQ_POLLIN) read_monitor(*monitors_[i - kFirstMonitor]);
      }
      if (items_[kWake].revents & ZMQ_POLLIN) take_commands();
      if (items_[kPull].revents & ZMQ_POLLIN) drain();
      handle_urgent();
      report_gone();
      for (size_t n = 0; n < kHandledPerPoll && !normal_.empty(); ++n) {
        Received r = std::move(normal_.front());
        normal_.pop_front();
        handle(std::move(r));
        if (drain() > 0) handle_urgent();
      }
    }
  }

 private:
  static constexpr size_t kPull = 0, kWake = 1, kFirstMonitor = 2;
  struct Received {
    Message message;
    std::string peer;
  };

  void rebuild_poll_items() {
    items_.clear();
    items_.push_back(zmq_pollitem_t{ep_.pull_.handle(), 0, ZMQ_POLLIN, 0});
    items_.push_back(zmq_pollitem_t{nullptr, ep_.wake_fd_, ZMQ_POLLIN, 0});
    for (auto& m : monitors_)
      items_.push_back(zmq_pollitem_t{m->socket().handle(), 0, ZMQ_POLLIN, 0});
  }

  void take_commands() {
    uint64_t count;
    [[maybe_unused]] ssize_t n = ::read(ep_.wake_fd_, &count, sizeof(count));
    std::vector<MonitorCommand> commands;
    {
      MutexLock lock(ep_.control_mu_);
      commands.swap(ep_.commands_);
    }
    for (MonitorCommand& c : commands) {
      if (c.monitor) {
        monitors_.push_back(std::move(c.monitor));
      } else {
        std::erase_if(monitors_, [&](const auto& m) { return m->id() == c.id; });
      }
    }
    rebuild_poll_items();
  }

  void read_monitor(PeerMonitor& monitor) {
    PeerMonitor::Observed seen = monitor.read_events();
    ep_.disconnects_.fetch_add(seen.disconnects, std::memory_order_relaxed);
    ep_.auth_failed_.fetch_add(seen.auth_failures, std::memory_order_relaxed);
    // A peer forgotten meanwhile is not reported: its caller already gave up on it.
    if (seen.gone && ep_.is_current_monitor(monitor.peer_endpoint(), monitor.id())) {
      gone_.push_back(monitor.peer_endpoint());
    }
    if (seen.auth_failures > 0 && ep_.on_peer_refused_ &&
        ep_.is_current_monitor(monitor.peer_endpoint(), monitor.id())) {
      refused_.push_back(monitor.peer_endpoint());
    }
  }

  // Reads up to drain_batch messages already queued, without blocking, while fewer than
  // max_held_ are held; decodes them into urgent_ / normal_. Returns how many were read.
  size_t drain() {
    size_t n = 0;
    while (n < ep_.options_.drain_batch && urgent_.size() + normal_.size() < max_held_) {
      std::vector<zmq::message_t> parts;
      bool too_many = false;
      try {
        zmq::message_t first;
        if (!ep_.pull_.recv(first, zmq::recv_flags::dontwait)) break;
        bool more = first.more();
        parts.push_back(std::move(first));
        // The rest of a multipart message is already here (ZeroMQ delivers it atomically);
        // beyond max_frames it is drained and the message is dropped as malformed.
        while (more) {
          zmq::message_t part;
          if (!ep_.pull_.recv(part, zmq::recv_flags::none)) break;
          more = part.more();
          if (parts.size() < ep_.options_.max_frames) {
            parts.push_back(std::move(part));
          } else {
            too_many = true;
          }
        }
      } catch (const zmq::error_t& e) {
        if (e.num() != ETERM && e.num() != EINTR) {
          PDKV_LOG_WARN("zmq endpoint {}: receive failed: {}", ep_.endpoint_, e.what());
        }
        break;
      }
      ++n;
      decode(parts, too_many);
    }
    if (n > 0) ep_.drained_batches_.fetch_add(1, std::memory_order_relaxed);
    return n;
  }

  void decode(std::vector<zmq::message_t>& parts, bool too_many) {
    std::string peer = "unknown peer";
    try {
      if (const char* addr = parts[0].gets("Peer-Address")) peer = addr;
    } catch (const zmq::error_t&) {
      // Not every transport reports it; the log just says "unknown peer".
    }
    Result<Message> msg = data_loss(fmt::format("more than {} frames", ep_.options_.max_frames));
    if (!too_many) {
      std::vector<std::string_view> views;
      views.reserve(parts.size());
      for (const auto& p : parts) views.emplace_back(p.data<char>(), p.size());
      msg = decode_message(views);
    }
    if (!msg.ok()) {
      ep_.malformed_.fetch_add(1, std::memory_order_relaxed);
      PDKV_LOG_WARN_LIMITED("zmq endpoint {}: dropped a malformed message from {}: {}",
                            ep_.endpoint_, peer, msg.status().message());
      return;
    }
    bool urgent = is_urgent(*msg);
    (urgent ? urgent_ : normal_).push_back(Received{std::move(msg).value(), std::move(peer)});
  }

  void handle_urgent() {
    while (!urgent_.empty()) {
      Received r = std::move(urgent_.front());
      urgent_.pop_front();
      ep_.urgent_.fetch_add(1, std::memory_order_relaxed);
      handle(std::move(r));
    }
  }

  void handle(Received&& r) {
    ep_.received_.fetch_add(1, std::memory_order_relaxed);
    Status st;
    try {
      st = ep_.handler_(std::move(r.message), r.peer);
    } catch (const std::exception& e) {
      st = internal_error(fmt::format("handler threw: {}", e.what()));
    } catch (...) {
      st = internal_error("handler threw a non-standard exception");
    }
    if (!st.ok()) {
      ep_.handler_errors_.fetch_add(1, std::memory_order_relaxed);
      PDKV_LOG_WARN("zmq endpoint {}: handler failed on a message from {}: {}", ep_.endpoint_,
                    r.peer, st.to_string());
    }
  }

  void report_gone() {
    for (const std::string& peer : gone_) {
      ep_.peers_gone_.fetch_add(1, std::memory_order_relaxed);
      PDKV_LOG_INFO("zmq endpoint {}: peer {} is gone (connection closed, reconnect refused)",
                    ep_.endpoint_, peer);
      if (!ep_.on_peer_gone_) continue;
      try {
        ep_.on_peer_gone_(peer);
      } catch (const std::exception& e) {
        PDKV_LOG_WARN("zmq endpoint {}: on_peer_gone({}) threw: {}", ep_.endpoint_, peer, e.what());
      } catch (...) {
        PDKV_LOG_WARN("zmq endpoint {}: on_peer_gone({}) threw", ep_.endpoint_, peer);
      }
    }
    gone_.clear();
    for (const std::string& peer : refused_) {
      try {
        ep_.on_peer_refused_(peer);
      } catch (...) {
        PDKV_LOG_WARN("zmq endpoint {}: on_peer_refused({}) threw", ep_.endpoint_, peer);
      }
    }
    refused_.clear();
  }

  // Closes every socket this thread owns, and the monitors still waiting to be taken
  // (shutdown() posts none after it set stopping_), before the context is terminated.
  void close_all() {
    std::vector<MonitorCommand> commands;
    {
      MutexLock lock(ep_.control_mu_);
      commands.swap(ep_.commands_);
    }
    commands.clear();
    monitors_.clear();
    ep_.pull_.close();
  }

  ZmqEndpoint& ep_;
  const size_t max_held_;
  std::vector<std::unique_ptr<PeerMonitor>> monitors_;
  std::vector<zmq_pollitem_t> items_;  // [pull, wake, monitors_...]
  std::deque<Received> urgent_, normal_;
  std::vector<std::string> gone_;
  std::vector<std::string> refused_;  // peers that refused our security handshake
};

void ZmqEndpoint::receive_loop() { ReceiveLoop(*this).run(); }

}  // namespace pdkv::proto
