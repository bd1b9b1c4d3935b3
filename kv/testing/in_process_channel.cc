#include "kv/testing/in_process_channel.h"

#include "proto/codec.h"

namespace pdkv::kv::testing {

class InProcessBus::Channel : public ControlChannel {
 public:
  Channel(InProcessBus& bus, std::string endpoint, ChannelCallbacks callbacks)
      : bus_(bus), endpoint_(std::move(endpoint)), callbacks_(std::move(callbacks)) {
    thread_ = std::thread([this] { run(); });
  }
  ~Channel() override { stop(); }
  void stop() override {
    {
      MutexLock lock(bus_.mu_);
      bus_.channels_.erase(endpoint_);
    }
    {
      MutexLock lock(mu_);
      stopping_ = true;
      wake_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }
  const std::string& endpoint() const override { return endpoint_; }
  Status send(const std::string& peer, const proto::Message& message) override {
    proto::Multipart frames = proto::encode_message(message);
    InProcessBus::Tap tap;
    {
      MutexLock lock(bus_.mu_);
      tap = bus_.tap_;
    }
    if (tap) tap(peer, message, frames[0].size() + frames[1].size());
    MutexLock lock(bus_.mu_);
    if (bus_.unreachable_[peer]) return Status();  // lost on the way, as on a dead link
    if (bus_.refusing_[peer]) {
      // As ZeroMQ answers a send to a peer whose queue is full.
      return unavailable("in-process bus: " + peer + " does not take messages");
    }
    auto it = bus_.channels_.find(peer);
    if (it == bus_.channels_.end()) return Status();  // ZeroMQ would queue, then drop
    it->second->deliver(std::move(frames));
    return Status();
  }
  Result<size_t> send_burst(const std::string& peer,
                            std::span<const proto::Message> messages) override {
    for (size_t i = 0; i < messages.size(); ++i) {
      Status sent = send(peer, messages[i]);
      if (!sent.ok()) {
        if (i == 0 && sent.code() != StatusCode::kUnavailable) return sent;
        return i;
      }
    }
    return messages.size();
  }
  void deliver(proto::Multipart frames) {
    MutexLock lock(mu_);
    inbox_.push_back(std::move(frames));
    wake_.notify_one();
  }
  // Runs on_peer_gone on this channel's thread, as the ZeroMQ channel does.
  void report_gone(const std::string& peer) {
    MutexLock lock(mu_);
    gone_.push_back(peer);
    wake_.notify_one();
  }

 private:
  void run() {
    while (true) {
      proto::Multipart frames;
      std::vector<std::string> gone;
      {
        MutexLock lock(mu_);
        wake_.wait_until(mu_, TimePoint::max(), [&]() PDKV_REQUIRES(mu_) {
          return stopping_ || !inbox_.empty() || !gone_.empty();
        });
        if (stopping_) return;
        gone.swap(gone_);
        if (!inbox_.empty()) {
          frames = std::move(inbox_.front());
          inbox_.pop_front();
        }
      }
      for (const std::string& peer : gone) {
        if (callbacks_.on_peer_gone) callbacks_.on_peer_gone(peer);
      }
      if (frames.empty()) continue;
      auto views = proto::views_of(frames);
      auto message = proto::decode_message(views);
      if (message.ok()) callbacks_.on_message(std::move(message).value());
    }
  }

  InProcessBus& bus_;
  const std::string endpoint_;
  ChannelCallbacks callbacks_;
  Mutex mu_;
  CondVar wake_;
  std::deque<proto::Multipart> inbox_ PDKV_GUARDED_BY(mu_);
  std::vector<std::string> gone_ PDKV_GUARDED_BY(mu_);
  bool stopping_ PDKV_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

ControlChannelFactory InProcessBus::factory() {
  return [this](const std::string& host,
                ChannelCallbacks callbacks) -> Result<std::unique_ptr<ControlChannel>> {
    std::string endpoint;
    {
      MutexLock lock(mu_);
      endpoint = "inproc://" + host + "/" + std::to_string(next_id_++);
    }
    auto channel = std::make_unique<Channel>(*this, endpoint, std::move(callbacks));
    MutexLock lock(mu_);
    channels_[endpoint] = channel.get();
    return std::unique_ptr<ControlChannel>(std::move(channel));
  };
}

void InProcessBus::set_tap(Tap tap) {
  MutexLock lock(mu_);
  tap_ = std::move(tap);
}

void InProcessBus::set_unreachable(const std::string& endpoint, bool unreachable) {
  MutexLock lock(mu_);
  unreachable_[endpoint] = unreachable;
}

void InProcessBus::kill(const std::string& endpoint) {
  MutexLock lock(mu_);
  unreachable_[endpoint] = true;
  for (auto& [name, channel] : channels_) {
    if (name != endpoint) channel->report_gone(endpoint);
  }
}

void InProcessBus::set_refusing(const std::string& endpoint, bool refusing) {
  MutexLock lock(mu_);
  refusing_[endpoint] = refusing;
}

void MemoryDirectory::forget(const std::string& addr) {
  MutexLock lock(mu_);
  ranks_.erase(addr);
}

Status MemoryDirectory::register_prefill_rank(const std::string& addr, const PrefillRankInfo& info,
                                              TimePoint) {
  RouteChange change;
  change.bootstrap_addr = addr;
  change.engine_rank = info.engine_rank;
  change.new_endpoint = info.control_endpoint;
  change.detail = "registered in the in-memory directory";
  {
    MutexLock lock(mu_);
    PrefillRankInfo& entry = ranks_[addr][info.engine_rank];
    change.old_endpoint = entry.control_endpoint;
    entry = info;
    changed_.notify_all();
  }
  if (change.old_endpoint != change.new_endpoint) listeners_.notify({change});
  return Status();
}

std::unique_ptr<RouteSubscription> MemoryDirectory::subscribe(RouteListener listener) {
  return listeners_.add(std::move(listener));
}

void MemoryDirectory::remove_rank(const std::string& addr, int64_t engine_rank) {
  RouteChange change;
  change.bootstrap_addr = addr;
  change.engine_rank = engine_rank;
  change.detail = "removed from the in-memory directory by the test";
  {
    MutexLock lock(mu_);
    auto inst = ranks_.find(addr);
    if (inst == ranks_.end()) return;
    auto rank = inst->second.find(engine_rank);
    if (rank == inst->second.end()) return;
    change.old_endpoint = rank->second.control_endpoint;
    inst->second.erase(rank);
    if (inst->second.empty()) ranks_.erase(inst);
  }
  listeners_.notify({change});
}

Result<PrefillRankInfo> MemoryDirectory::wait_for(const std::string& addr, int64_t engine_rank,
                                                  bool any, TimePoint deadline,
                                                  const Interrupt* interrupt) {
  Interrupt::Hook wake(interrupt, [this] {
    MutexLock lock(mu_);
    changed_.notify_all();
  });
  MutexLock lock(mu_);
  const PrefillRankInfo* found = nullptr;
  changed_.wait_until(mu_, deadline, [&]() PDKV_REQUIRES(mu_) {
    if (interrupt != nullptr && interrupt->fired()) return true;
    auto inst = ranks_.find(addr);
    if (inst == ranks_.end() || inst->second.empty()) return false;
    if (any) {
      found = &inst->second.begin()->second;
      return true;
    }
    auto rank = inst->second.find(engine_rank);
    if (rank == inst->second.end()) return false;
    found = &rank->second;
    return true;
  });
  if (found == nullptr && interrupt != nullptr && interrupt->fired()) {
    return aborted("lookup at " + addr + " interrupted");
  }
  if (found == nullptr) {
    return deadline_exceeded("no prefill rank " + std::to_string(engine_rank) + " registered at " +
                             addr);
  }
  return *found;
}

Result<PrefillRankInfo> MemoryDirectory::lookup_instance(const std::string& addr,
                                                         TimePoint deadline,
                                                         const Interrupt* interrupt) {
  return wait_for(addr, -1, true, deadline, interrupt);
}

Result<PrefillRankInfo> MemoryDirectory::lookup_prefill_rank(const std::string& addr,
                                                             int64_t dp_group, int64_t tp_rank,
                                                             TimePoint deadline,
                                                             const Interrupt* interrupt) {
  PDKV_ASSIGN_OR_RETURN(PrefillRankInfo any, wait_for(addr, -1, true, deadline, interrupt));
  return wait_for(addr, dp_group * any.tp_size + tp_rank, false, deadline, interrupt);
}

}  // namespace pdkv::kv::testing
