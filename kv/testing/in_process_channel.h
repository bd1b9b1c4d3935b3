// In-process ControlChannel and RouteDirectory for unit tests of the KV managers: every
// message still goes through proto's encoder and decoder (so tests exercise the codecs),
// and is delivered on a per-channel thread, as a ZeroMQ channel would deliver it.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "kv/control/control_channel.h"
#include "kv/route/route_directory.h"
#include "kv/route/route_listeners.h"

namespace pdkv::kv::testing {

class InProcessBus {
 public:
  // A factory whose channels reach each other through this bus. The bus must outlive them.
  ControlChannelFactory factory();
  // Drops every message to `endpoint` from now on (a dead peer), or stops dropping.
  void set_unreachable(const std::string& endpoint, bool unreachable);
  // The process behind `endpoint` died: its messages are lost from now on and every other
  // channel's on_peer_gone hears of it (as ZeroMQ channels do when a reconnect is refused).
  void kill(const std::string& endpoint);
  // Sends to `endpoint` fail with kUnavailable (queue full) from now on, or stop failing.
  void set_refusing(const std::string& endpoint, bool refusing);
  // Shows `tap` every message sent from now on, with its encoded size, before it is
  // delivered (on the sender's thread): what a test asserts about the wire.
  using Tap = std::function<void(const std::string& to, const proto::Message&, size_t bytes)>;
  void set_tap(Tap tap);

 private:
  class Channel;
  friend class Channel;
  Mutex mu_;
  std::map<std::string, Channel*> channels_ PDKV_GUARDED_BY(mu_);
  std::map<std::string, bool> unreachable_ PDKV_GUARDED_BY(mu_);
  std::map<std::string, bool> refusing_ PDKV_GUARDED_BY(mu_);
  Tap tap_ PDKV_GUARDED_BY(mu_);
  int next_id_ PDKV_GUARDED_BY(mu_) = 0;
};

class MemoryDirectory : public RouteDirectory {
 public:
  Status register_prefill_rank(const std::string& bootstrap_addr, const PrefillRankInfo& info,
                               TimePoint deadline) override;
  Result<PrefillRankInfo> lookup_instance(const std::string& bootstrap_addr, TimePoint deadline,
                                          const Interrupt* interrupt = nullptr) override;
  Result<PrefillRankInfo> lookup_prefill_rank(const std::string& bootstrap_addr, int64_t dp_group,
                                              int64_t tp_rank, TimePoint deadline,
                                              const Interrupt* interrupt = nullptr) override;
  // Forgets every rank registered at the address: a bootstrap server that restarted
  // (which tells nobody, as the HTTP directory).
  void forget(const std::string& bootstrap_addr);
  // A watching registry (as etcd): subscribers hear of ranks that register, move to
  // another endpoint, or are removed with remove_rank().
  std::unique_ptr<RouteSubscription> subscribe(RouteListener listener) override;
  // The rank's route vanishes (its lease expired, say) and subscribers are told.
  void remove_rank(const std::string& bootstrap_addr, int64_t engine_rank);

 private:
  Result<PrefillRankInfo> wait_for(const std::string& addr, int64_t engine_rank, bool any,
                                   TimePoint deadline, const Interrupt* interrupt);
  Mutex mu_;
  CondVar changed_;
  std::map<std::string, std::map<int64_t, PrefillRankInfo>> ranks_ PDKV_GUARDED_BY(mu_);
  RouteListeners listeners_;
};

}  // namespace pdkv::kv::testing
