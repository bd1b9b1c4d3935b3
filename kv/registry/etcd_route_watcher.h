// EtcdRouteWatcher: the decode side of the etcd registry. Mirrors every rank entry under
// the prefix in memory: one range read, then a watch from the next revision, so a new or
// vanished prefill rank is seen when etcd reports it, without polling. Lookups wait on
// the mirror (a condition variable) until the entry they need is there or their deadline.
//
// The watched member is probed every second (a linearizable read, 1 s timeout): a frozen
// or partitioned member would keep the stream open and silent, so the watch moves to
// another member when the probe fails.
// While the watch is down (etcd unreachable, a member lost), the mirror is not trusted:
// lookups wait for it to be re-read from another endpoint, and at their deadline fail
// naming etcd and its last error. A rank that vanished fails its lookups at the deadline
// with the key it waited for, so a room's reason says what was missing where.
//
// Subscribers (subscribe()) hear of every rank that appears, moves to another control
// endpoint or vanishes, from the watch's events and from the difference between the
// mirror and a re-read after the watch was down. An unreachable etcd is not a vanished
// route: while the mirror is not trusted, nothing is reported.
//
// Entries are validated with the HTTP server's parser (bootstrap::parse_registration);
// malformed keys or values (another tool's, or hostile) are ignored (logged, rate-limited),
// and at most kMaxEtcdRouteEntries are kept.
//
// With a cluster secret only sealed entries whose signature verifies are taken
// (etcd_route_seal.h). A verified entry rewritten underneath its owner (unsigned, or
// signed for another key or lease) is not followed: the mirror keeps the owner's entry,
// which the owner puts back within its re-assert period (etcd_rank_publisher.h), so
// lookups and rooms go on to the real rank and subscribers hear of nothing. Should the
// owner be gone (its lease, which the rewrite detached the key from, ends), the probe
// thread sees that lease end and the entry vanishes as it would have with its key.
//
// Sealed entries also carry their owner's run and an expiry (etcd_route_seal.h): the
// mirror remembers the newest run seen per key and refuses an entry of an older one (a
// crashed run's entry put back under its kept-alive lease), and the probe thread drops
// an entry whose sealed expiry passed (its owner stopped re-sealing: the rank is gone).
//
// Threads: owns one watch thread and one probe thread (both block on etcd); every other
// method may be called from any thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/registration.h"
#include "common/clock.h"
#include "common/cluster_key.h"
#include "common/interrupt.h"
#include "common/mutex.h"
#include "kv/registry/etcd_client.h"
#include "kv/registry/etcd_route_seal.h"
#include "kv/route/route_directory.h"
#include "kv/route/route_listeners.h"

namespace pdkv::kv {

inline constexpr size_t kMaxEtcdRouteEntries = 1u << 16;

class EtcdRouteWatcher {
 public:
  // With `key` (null: none) only entries signed with the cluster secret are taken.
  EtcdRouteWatcher(std::shared_ptr<EtcdClient> client, std::string prefix,
                   std::shared_ptr<const ClusterKey> key = nullptr);
  ~EtcdRouteWatcher();
  EtcdRouteWatcher(const EtcdRouteWatcher&) = delete;
  EtcdRouteWatcher& operator=(const EtcdRouteWatcher&) = delete;

  // The layout of `instance` (from any of its ranks); kDeadlineExceeded naming etcd;
  // kAborted once `interrupt` (may be null) fires.
  Result<bootstrap::InstanceLayout> wait_for_instance(const std::string& instance,
                                                      TimePoint deadline,
                                                      const Interrupt* interrupt = nullptr)
      PDKV_EXCLUDES(mu_);
  // The entry of rank (dp_group, tp_rank) of `instance`; kOutOfRange outside its layout,
  // kDeadlineExceeded naming etcd and the key when it is not registered by `deadline`.
  Result<bootstrap::PrefillRegistration> wait_for_rank(const std::string& instance,
                                                       int64_t dp_group, int64_t tp_rank,
                                                       TimePoint deadline,
                                                       const Interrupt* interrupt = nullptr)
      PDKV_EXCLUDES(mu_);

  // Every instance's entries, by engine rank (for `pdkv bootstrap --registry etcd`).
  using Snapshot = std::map<std::string, std::map<int64_t, bootstrap::PrefillRegistration>>;
  // nullopt while the mirror is not in sync with etcd (the reason in `why`, if given).
  std::optional<Snapshot> snapshot(std::string* why = nullptr) const PDKV_EXCLUDES(mu_);

  // Route changes from now on, delivered on the watch thread (route_directory.h), and on
  // the probe thread for a kept entry whose owner's lease ended.
  std::unique_ptr<RouteSubscription> subscribe(RouteListener listener);

 private:
  // An interrupt's hook: wakes the lookups waiting on changed_ (they see it fired).
  void wake_waiters() PDKV_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    changed_.notify_all();
  }
  static bool interrupted(const Interrupt* interrupt) {
    return interrupt != nullptr && interrupt->fired();
  }
  struct Entry {
    std::string instance;
    int64_t engine_rank = 0;
    bootstrap::PrefillRegistration reg;
    int64_t lease = 0;  // the lease the verified entry was put under
    // Its key now holds an entry that does not verify: kept until the owner puts its
    // entry back or the owner's lease ends (checked by the probe thread).
    bool contested = false;
    SealStamp stamp;  // with a secret: the owner's run and the entry's expiry
  };
  enum class Applied {
    kTaken,     // the mirror follows the event
    kIgnored,   // not a rank entry, or over the limit: nothing changed
    kRejected,  // with a secret, an entry that does not verify: never followed
  };
  void run();
  // Applies one event to the mirror, adding what it changed for subscribers to `changes`.
  Applied apply(const EtcdKeyValue& kv, bool deleted, std::vector<RouteChange>& changes)
      PDKV_REQUIRES(mu_);
  // Drops contested entries whose owner's lease has ended (probe thread).
  void check_contested() PDKV_EXCLUDES(mu_);
  // Drops entries whose sealed expiry passed (probe thread).
  void drop_expired() PDKV_EXCLUDES(mu_);
  // Replaces the mirror with a fresh read, adding the differences to `changes`.
  void reload(const std::vector<EtcdKeyValue>& kvs, std::vector<RouteChange>& changes)
      PDKV_REQUIRES(mu_);
  RouteChange change_of(const std::string& key, const Entry* before, const Entry* after,
                        std::string detail) const;
  const bootstrap::InstanceLayout* layout_of(const std::string& instance) const PDKV_REQUIRES(mu_);
  std::string unsynced_reason() const PDKV_REQUIRES(mu_);
  // "; <why>" when a key starting with `prefix` holds an entry that was rejected (so a
  // lookup's failure says a rank without the secret may be there), else "".
  std::string rejected_note(const std::string& prefix) const PDKV_REQUIRES(mu_);

  const std::shared_ptr<EtcdClient> client_;
  const std::string prefix_;
  const std::shared_ptr<const ClusterKey> key_;

  mutable Mutex mu_;
  CondVar changed_;
  bool synced_ PDKV_GUARDED_BY(mu_) = false;
  std::string last_error_ PDKV_GUARDED_BY(mu_) = "not read yet";
  std::map<std::string, Entry> entries_ PDKV_GUARDED_BY(mu_);  // by etcd key
  // Keys whose entry did not verify (with a secret), with the reason: at most
  // kMaxEtcdRouteEntries, for failure messages only.
  std::map<std::string, std::string> rejected_ PDKV_GUARDED_BY(mu_);
  // The newest owner run seen per key (with a secret), kept across deletes and re-reads
  // so an older run's entry is refused for as long as this process lives: at most
  // kMaxEtcdRouteEntries keys.
  std::map<std::string, SealStamp> newest_run_ PDKV_GUARDED_BY(mu_);
  std::unique_ptr<EtcdClient::WatchStream> stream_ PDKV_GUARDED_BY(mu_);
  RouteListeners listeners_;  // called by the watch (or probe) thread, without mu_

  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // Probes the watched member every kWatchProbeInterval: a frozen or cut-off member
  // keeps a watch open and silent, so silence alone proves nothing.
  void probe_loop();
  std::thread prober_;
};

inline constexpr std::chrono::milliseconds kWatchProbeInterval{1000};

}  // namespace pdkv::kv
