// RouteDirectory: the bootstrap rendezvous as the KV managers use it. A prefill rank
// publishes a PrefillRankInfo; a decode reads its instance's description and the control
// endpoints of the ranks it routes to. Production: kv/route/bootstrap_route_directory.h over
// the HTTP bootstrap client, or kv/registry/etcd_route_directory.h (PDKV_REGISTRY=etcd);
// tests may use an in-memory one.
//
// Calls may block up to their deadline (lookups retry with backoff while the asked
// ranks are not registered yet); managers call them from their own resolver threads,
// never from an engine's scheduler thread. A lookup given an Interrupt returns kAborted
// soon after it fires (a manager shutting down does not wait out the deadline).
// Thread-safe.
//
// A directory that watches its routes (etcd) also reports their changes to subscribers
// (subscribe()), so a decode hears of a vanished prefill rank without polling; the HTTP
// directory does not watch, and its decodes learn of a dead rank by liveness alone.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/interrupt.h"
#include "common/status.h"
#include "proto/messages.h"

namespace pdkv::kv {

// What one prefill rank publishes about itself and its instance.
struct PrefillRankInfo {
  int64_t engine_rank = 0;
  int64_t tp_size = 1;  // attention TP per DP group
  int64_t dp_size = 1;
  std::string control_endpoint;  // its ControlChannel endpoint
  bool enable_mla_l1_5_cache = false;
  proto::KvLayout layout;
  std::vector<uint64_t> kv_item_lens;
  std::vector<uint64_t> state_item_lens;
  // Pipeline parallelism: the instance's stage count, and the stage this rank serves
  // (kv/route/stage_address.h: a stage is looked up at its own qualified address).
  int64_t pp_size = 1;
  int64_t pp_rank = 0;
};

// One prefill rank's route as a watching directory saw it change: it appeared, moved to
// another control endpoint (a restarted process), or vanished (withdrawn at shutdown, its
// lease revoked or expired). `old_endpoint` empty: the rank was not registered before;
// `new_endpoint` empty: it is not registered now.
struct RouteChange {
  std::string bootstrap_addr;  // the prefill instance
  int64_t engine_rank = 0;
  std::string old_endpoint;
  std::string new_endpoint;
  // Where and how, for failure reasons: "its key /pdkv/instances/a/ranks/0 was deleted in
  // etcd at 127.0.0.1:2379 (...)".
  std::string detail;

  // The route a decode may have resolved (old_endpoint) is no longer the rank's.
  bool route_lost() const { return !old_endpoint.empty() && old_endpoint != new_endpoint; }
};

// Runs on the directory's own thread, outside the directory's locks, one change at a time
// in the order they happened. It must not subscribe or drop a subscription itself.
using RouteListener = std::function<void(const RouteChange&)>;

// Dropping it ends the calls; its destructor waits for a call in progress to return, so
// the listener's captures may be destroyed right after.
class RouteSubscription {
 public:
  virtual ~RouteSubscription() = default;
};

class RouteDirectory {
 public:
  virtual ~RouteDirectory() = default;
  // Publishes (or replaces) this rank's entry; retried until `deadline`.
  virtual Status register_prefill_rank(const std::string& bootstrap_addr,
                                       const PrefillRankInfo& info, TimePoint deadline) = 0;
  // Withdraws this rank's entry at a clean shutdown, so decodes stop routing to it at
  // once. The HTTP directory keeps its entry (the server's table has no lease; a
  // restarted rank replaces it); etcd revokes the rank's lease. Bounded by `deadline`.
  virtual Status unregister_prefill_rank(const std::string& bootstrap_addr,
                                         const PrefillRankInfo& info, TimePoint deadline) {
    (void)bootstrap_addr, (void)info, (void)deadline;
    return Status();
  }
  // The instance-wide part of the entries (sizes, layout), from any registered rank:
  // what a decode needs before it can choose ranks. Retried until `deadline`.
  virtual Result<PrefillRankInfo> lookup_instance(const std::string& bootstrap_addr,
                                                  TimePoint deadline,
                                                  const Interrupt* interrupt = nullptr) = 0;
  // The entry of prefill rank (dp_group, tp_rank) of the instance at `bootstrap_addr`;
  // retried (NotFound while unregistered) until `deadline`.
  virtual Result<PrefillRankInfo> lookup_prefill_rank(const std::string& bootstrap_addr,
                                                      int64_t dp_group, int64_t tp_rank,
                                                      TimePoint deadline,
                                                      const Interrupt* interrupt = nullptr) = 0;
  // Reports every later change of the routes this directory holds to `listener`, until
  // the subscription is dropped. nullptr: this directory does not watch its routes (HTTP).
  virtual std::unique_ptr<RouteSubscription> subscribe(RouteListener listener) {
    (void)listener;
    return nullptr;
  }
};

}  // namespace pdkv::kv
