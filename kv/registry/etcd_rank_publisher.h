// EtcdRankPublisher: the prefill side of the etcd registry. Publishes rank entries
// (etcd_route_keys.h) under one lease of `lease_ttl_s` and keeps the lease alive from
// its own thread, so a rank whose process dies stops renewing and its keys vanish after
// the TTL; withdraw() (clean shutdown) deletes them at once.
//
// Layout conflicts are refused as the HTTP server's RouteTable refuses them
// (bootstrap/route_table.h): a registration whose layout differs from another rank of
// the same instance fails with kFailedPrecondition naming the field, and changes
// nothing. The check is a read + an etcd transaction that puts only if no key of the
// instance changed since the read, so two ranks racing cannot both win.
//
// A lease lost while etcd was unreachable longer than the TTL (the keys are gone) is
// replaced by a new one and every entry published again, with the same check.
//
// With a cluster secret every entry is sealed (etcd_route_seal.h): signed for its key and
// lease, so readers with the secret ignore what anyone else writes there. The owner also
// re-asserts its entries: with every renewal (three per TTL) it reads its keys back and
// puts again, under its lease and with the same check, any that is missing or differs
// from what it published. A route rewritten underneath it (or deleted) is thus restored
// within TTL / 3 plus a request, and a poisoned key put without a lease becomes the
// owner's leased one again, which vanishes with the owner. Without a secret entries are
// re-asserted the same way, but readers cannot tell a rewrite from the owner's entry.
//
// Sealed entries also carry this publisher's incarnation (a random id and its start
// time) and an expiry kSealLifetimeTtls TTLs ahead (etcd_route_seal.h). The renewal that
// finds less than two TTLs left seals every entry again with a fresh expiry and puts it,
// so readers refuse a dead owner's entry soon after its last re-seal, even if someone
// keeps its lease alive.
//
// Threads: owns the keep-alive thread (waits on etcd, bounded by the TTL); publish() and
// withdraw() may be called from any thread and block on etcd until their deadline.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "bootstrap/registration.h"
#include "common/clock.h"
#include "common/cluster_key.h"
#include "common/mutex.h"
#include "kv/registry/etcd_client.h"
#include "kv/registry/etcd_route_seal.h"

namespace pdkv::kv {

class EtcdRankPublisher {
 public:
  // `key` (null: none) seals every entry.
  EtcdRankPublisher(std::shared_ptr<EtcdClient> client, std::string prefix, int64_t lease_ttl_s,
                    std::shared_ptr<const ClusterKey> key = nullptr);
  // Stops the keep-alive and revokes the lease (what is left published vanishes now).
  ~EtcdRankPublisher();
  EtcdRankPublisher(const EtcdRankPublisher&) = delete;
  EtcdRankPublisher& operator=(const EtcdRankPublisher&) = delete;

  // Publishes (or replaces) the entry of reg.engine_rank in `instance`. Publishing the
  // same entry again is a no-op while its lease lives (the managers' periodic refresh).
  Status publish(const std::string& instance, const bootstrap::PrefillRegistration& reg,
                 TimePoint deadline) PDKV_EXCLUDES(mu_);
  // Deletes the entry (the lease goes with the last one).
  Status withdraw(const std::string& instance, int64_t engine_rank, TimePoint deadline)
      PDKV_EXCLUDES(mu_);

  // The current lease (0 = none): tests check it is revoked or expires.
  int64_t lease() const PDKV_EXCLUDES(mu_);

 private:
  struct Entry {
    std::string instance;
    bootstrap::PrefillRegistration reg;
  };
  Status ensure_lease(TimePoint deadline) PDKV_REQUIRES(mu_);
  Status put_checked(const Entry& entry, TimePoint deadline) PDKV_REQUIRES(mu_);
  // The value stored for `entry` at `key` under the current lease.
  std::string value_of(const std::string& key, const Entry& entry) const PDKV_REQUIRES(mu_);
  // Reads every published key back and puts again what is missing or differs.
  void reassert(TimePoint deadline) PDKV_REQUIRES(mu_);
  // Seals every entry again with a fresh expiry and puts it, when less than two TTLs are
  // left or the last re-seal failed; false when none was due (or entries are unsealed).
  bool reseal_if_due(TimePoint deadline) PDKV_REQUIRES(mu_);
  void keep_alive_loop();
  // One renewal (or re-registration after a lost lease); false if etcd did not answer.
  bool renew_once(bool quiet) PDKV_EXCLUDES(mu_);

  const std::shared_ptr<EtcdClient> client_;
  const std::string prefix_;
  const int64_t lease_ttl_s_;
  const std::shared_ptr<const ClusterKey> key_;

  // Serialises every change of the published state with its etcd calls (a few threads
  // at most: the manager's start/refresh/shutdown and the keep-alive).
  mutable Mutex mu_;
  int64_t lease_ PDKV_GUARDED_BY(mu_) = 0;
  SealStamp stamp_ PDKV_GUARDED_BY(mu_);  // expires_ms 0 until the first lease
  bool reseal_pending_ PDKV_GUARDED_BY(mu_) = false;
  std::map<std::string, Entry> entries_ PDKV_GUARDED_BY(mu_);  // by etcd key

  Mutex stop_mu_;
  CondVar stop_wake_;
  std::atomic<bool> stopping_{false};
  std::thread keeper_;
};

}  // namespace pdkv::kv
