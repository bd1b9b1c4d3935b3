#include "kv/registry/etcd_rank_publisher.h"

#include <fmt/format.h>
#include <sodium.h>

#include <algorithm>

#include "common/logging.h"
#include "kv/registry/etcd_route_keys.h"
#include "kv/registry/etcd_route_seal.h"

namespace pdkv::kv {

EtcdRankPublisher::EtcdRankPublisher(std::shared_ptr<EtcdClient> client, std::string prefix,
                                     int64_t lease_ttl_s, std::shared_ptr<const ClusterKey> key)
    : client_(std::move(client)),
      prefix_(std::move(prefix)),
      lease_ttl_s_(lease_ttl_s),
      key_(std::move(key)) {
  // A new id at every start: readers tell this run's entries from a crashed run's.
  randombytes_buf(&stamp_.incarnation, sizeof stamp_.incarnation);
  stamp_.started_ms = unix_now_ms();
  keeper_ = std::thread([this] { keep_alive_loop(); });
}

EtcdRankPublisher::~EtcdRankPublisher() {
  {
    MutexLock lock(stop_mu_);
    stopping_ = true;
    stop_wake_.notify_all();
  }
  keeper_.join();
  MutexLock lock(mu_);
  if (lease_ != 0) {
    Status revoked = client_->revoke_lease(lease_, now() + std::chrono::seconds(2));
    if (!revoked.ok())
      PDKV_LOG_WARN("etcd registry: lease {:x} not revoked ({}); its keys expire in {} s", lease_,
                    revoked.to_string(), lease_ttl_s_);
    lease_ = 0;
  }
}

int64_t EtcdRankPublisher::lease() const {
  MutexLock lock(mu_);
  return lease_;
}

namespace {
int64_t seal_expiry_ms(int64_t lease_ttl_s) {
  return unix_now_ms() + kSealLifetimeTtls * lease_ttl_s * 1000;
}
}  // namespace

Status EtcdRankPublisher::ensure_lease(TimePoint deadline) {
  if (lease_ != 0) return Status();
  PDKV_ASSIGN_OR_RETURN(lease_, client_->grant_lease(lease_ttl_s_, deadline));
  stamp_.expires_ms = seal_expiry_ms(lease_ttl_s_);
  return Status();
}

std::string EtcdRankPublisher::value_of(const std::string& key, const Entry& entry) const {
  return seal_route_entry(key_.get(), key, lease_, bootstrap::registration_to_json(entry.reg),
                          stamp_);
}

bool EtcdRankPublisher::reseal_if_due(TimePoint deadline) {
  if (!key_) return false;  // unsealed entries carry no expiry
  if (!reseal_pending_ && stamp_.expires_ms - unix_now_ms() >= 2 * lease_ttl_s_ * 1000)
    return false;
  stamp_.expires_ms = seal_expiry_ms(lease_ttl_s_);
  reseal_pending_ = false;
  for (const auto& [key, entry] : entries_) {
    Status put = put_checked(entry, deadline);
    if (!put.ok()) {
      // The entries not put keep their old expiry: all are sealed again next renewal.
      PDKV_LOG_WARN_LIMITED("etcd registry: sealing {} again failed: {}", key, put.to_string());
      reseal_pending_ = true;
    }
  }
  return true;
}

Status EtcdRankPublisher::put_checked(const Entry& entry, TimePoint deadline) {
  const std::string guard = etcd_instance_prefix(prefix_, entry.instance);
  const std::string key = etcd_rank_key(prefix_, entry.instance, entry.reg.engine_rank);
  const std::string value = value_of(key, entry);
  while (true) {
    PDKV_ASSIGN_OR_RETURN(EtcdRange range, client_->range_prefix(guard, deadline));
    size_t others = 0;
    for (const EtcdKeyValue& kv : range.kvs) {
      if (kv.key == key) continue;
      // With a secret, an entry that does not verify is no rank's: readers ignore it, and
      // so does the layout check (else anyone who can write to etcd could block a rank).
      Result<bootstrap::PrefillRegistration> other = open_route_entry(key_.get(), kv);
      if (!other.ok()) continue;  // not ours to judge; readers ignore it too
      ++others;
      const std::string field = bootstrap::first_layout_difference(other->layout, entry.reg.layout);
      if (!field.empty()) {
        return failed_precondition(fmt::format(
            "field '{}': engine_rank {} disagrees with engine_rank {} already registered for "
            "instance {} in {}",
            field, entry.reg.engine_rank, other->engine_rank, entry.instance,
            client_->description()));
      }
    }
    PDKV_ASSIGN_OR_RETURN(
        bool put, client_->put_if_unchanged(guard, range.revision, key, value, lease_, deadline));
    if (put) return Status();
    if (now() >= deadline)
      return deadline_exceeded(fmt::format("{}: instance {} kept changing while registering",
                                           client_->description(), entry.instance));
  }
}

Status EtcdRankPublisher::publish(const std::string& instance,
                                  const bootstrap::PrefillRegistration& reg, TimePoint deadline) {
  Entry entry{instance, reg};
  const std::string key = etcd_rank_key(prefix_, instance, reg.engine_rank);
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (lease_ != 0 && it != entries_.end() && it->second.reg == reg) return Status();
  PDKV_RETURN_IF_ERROR(ensure_lease(deadline));
  PDKV_RETURN_IF_ERROR(put_checked(entry, deadline));
  entries_[key] = std::move(entry);
  return Status();
}

Status EtcdRankPublisher::withdraw(const std::string& instance, int64_t engine_rank,
                                   TimePoint deadline) {
  const std::string key = etcd_rank_key(prefix_, instance, engine_rank);
  MutexLock lock(mu_);
  if (entries_.erase(key) == 0) return Status();
  if (entries_.empty() && lease_ != 0) {
    const int64_t lease = lease_;
    lease_ = 0;
    return client_->revoke_lease(lease, deadline);
  }
  return client_->delete_key(key, deadline);
}

bool EtcdRankPublisher::renew_once(bool quiet) {
  MutexLock lock(mu_);
  if (lease_ == 0 && entries_.empty()) return true;
  const auto period = std::chrono::milliseconds(lease_ttl_s_ * 1000 / 3);
  const TimePoint deadline = now() + period;
  if (lease_ != 0) {
    Result<int64_t> ttl = client_->keep_alive(lease_, deadline);
    if (!ttl.ok()) {
      if (!quiet)
        PDKV_LOG_WARN("etcd registry: lease {:x} not renewed: {}", lease_,
                      ttl.status().to_string());
      return false;  // tried again shortly; the lease may outlive the outage
    }
    if (*ttl > 0) {
      // A quarter of the period at most: a member that went silent must not delay the
      // next renewal past the lease's TTL (the read-back is tried again next renewal).
      const TimePoint bounded = std::min(deadline, now() + period / 4);
      // A re-seal puts every entry, which is also this renewal's re-assert.
      if (!reseal_if_due(bounded)) reassert(bounded);
      return true;
    }
    PDKV_LOG_WARN(
        "etcd registry: lease {:x} expired (etcd unreachable longer than {} s); "
        "registering again",
        lease_, lease_ttl_s_);
    lease_ = 0;
  }
  Status granted = ensure_lease(deadline);
  for (const auto& [key, entry] : entries_) {
    if (!granted.ok()) break;
    granted = put_checked(entry, deadline);
  }
  if (!granted.ok()) {
    if (!quiet) PDKV_LOG_WARN("etcd registry: registering again failed: {}", granted.to_string());
    return false;
  }
  PDKV_LOG_INFO("etcd registry: {} rank(s) registered again under lease {:x}", entries_.size(),
                lease_);
  return true;
}

void EtcdRankPublisher::reassert(TimePoint deadline) {
  for (const auto& [key, entry] : entries_) {
    // A prefix read: the key alone, and ranks whose number starts with its digits.
    Result<EtcdRange> range = client_->range_prefix(key, deadline);
    if (!range.ok()) return;  // etcd did not answer: the next renewal reads again
    const std::string expected = value_of(key, entry);
    const EtcdKeyValue* found = nullptr;
    for (const EtcdKeyValue& kv : range->kvs) {
      if (kv.key == key) found = &kv;
    }
    if (found != nullptr && found->value == expected && found->lease == lease_) continue;
    PDKV_LOG_WARN_LIMITED(
        "etcd registry: entry {} in {} was {} underneath its owner; putting it back under "
        "lease {:x}",
        key, client_->description(),
        found == nullptr ? "deleted"
                         : (found->lease == lease_ ? "rewritten" : "rewritten without its lease"),
        lease_);
    Status put = put_checked(entry, deadline);
    if (!put.ok())
      PDKV_LOG_WARN_LIMITED("etcd registry: putting {} back failed: {}", key, put.to_string());
  }
}

void EtcdRankPublisher::keep_alive_loop() {
  // Three renewals per TTL: one lost renewal (a member failing over) costs nothing. A
  // failed one is tried again after 100 ms, so an election or a member's loss uses only
  // a small part of the TTL; the first failure in a row is logged.
  const auto period = std::chrono::milliseconds(lease_ttl_s_ * 1000 / 3);
  constexpr std::chrono::milliseconds kRetry{100};
  bool failing = false;
  while (true) {
    {
      MutexLock lock(stop_mu_);
      stop_wake_.wait_for(stop_mu_, failing ? kRetry : period, [this] { return stopping_.load(); });
    }
    if (stopping_) return;
    failing = !renew_once(failing);
  }
}

}  // namespace pdkv::kv
