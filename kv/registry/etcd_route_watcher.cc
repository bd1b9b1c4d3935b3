#include "kv/registry/etcd_route_watcher.h"

#include <fmt/format.h>

#include "common/logging.h"
#include "kv/registry/etcd_route_keys.h"
#include "kv/registry/etcd_route_seal.h"
#include "kv/route/bootstrap_route_directory.h"

namespace pdkv::kv {

EtcdRouteWatcher::EtcdRouteWatcher(std::shared_ptr<EtcdClient> client, std::string prefix,
                                   std::shared_ptr<const ClusterKey> key)
    : client_(std::move(client)), prefix_(std::move(prefix)), key_(std::move(key)) {
  thread_ = std::thread([this] { run(); });
  prober_ = std::thread([this] { probe_loop(); });
}

EtcdRouteWatcher::~EtcdRouteWatcher() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    if (stream_) stream_->cancel();
    changed_.notify_all();
  }
  thread_.join();
  prober_.join();
}

void EtcdRouteWatcher::probe_loop() {
  while (true) {
    {
      MutexLock lock(mu_);
      changed_.wait_for(mu_, kWatchProbeInterval, [this] { return stopping_.load(); });
      if (stopping_) return;
    }
    if (key_) {
      check_contested();
      drop_expired();
    }
    int endpoint = -1;
    EtcdClient::WatchStream* probed = nullptr;
    {
      MutexLock lock(mu_);
      if (!synced_ || !stream_) continue;
      probed = stream_.get();
      endpoint = probed->endpoint();
    }
    if (endpoint < 0) continue;
    Status alive = client_->probe(static_cast<size_t>(endpoint), kWatchProbeInterval);
    if (alive.ok()) continue;
    MutexLock lock(mu_);
    if (stream_.get() != probed) continue;  // the watch moved meanwhile
    PDKV_LOG_WARN("etcd registry: watched member does not answer ({}); watching another",
                  alive.message());
    probed->drop();
  }
}

void EtcdRouteWatcher::check_contested() {
  std::vector<std::pair<std::string, int64_t>> contested;
  {
    MutexLock lock(mu_);
    if (!synced_) return;  // an unreachable etcd says nothing about the owner
    for (const auto& [key, e] : entries_) {
      if (e.contested) contested.emplace_back(key, e.lease);
    }
  }
  std::vector<RouteChange> changes;
  for (const auto& [key, lease] : contested) {
    Result<int64_t> ttl = client_->lease_time_to_live(lease, now() + kWatchProbeInterval);
    if (!ttl.ok() || *ttl >= 0) continue;  // the owner lives (or etcd did not say): keep it
    MutexLock lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || !it->second.contested || it->second.lease != lease) continue;
    changes.push_back(change_of(
        key, &it->second, nullptr,
        fmt::format("its key {} in {} holds an entry that does not verify, and the lease of its "
                    "owner's entry ended (the rank is gone)",
                    key, client_->description())));
    entries_.erase(it);
    changed_.notify_all();
  }
  listeners_.notify(changes);
}

void EtcdRouteWatcher::drop_expired() {
  std::vector<RouteChange> changes;
  {
    MutexLock lock(mu_);
    if (!synced_) return;  // re-read (and checked) once etcd answers again
    const int64_t now_ms = unix_now_ms();
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.stamp.expires_ms + kSealClockSkew.count() >= now_ms) {
        ++it;
        continue;
      }
      changes.push_back(change_of(
          it->first, &it->second, nullptr,
          fmt::format("its entry at {} in {} was not sealed again by its owner before its "
                      "expiry (the rank is gone; its lease may be kept alive by another client)",
                      it->first, client_->description())));
      if (rejected_.size() < kMaxEtcdRouteEntries)
        rejected_[it->first] = "the entry's sealed expiry passed";
      it = entries_.erase(it);
      changed_.notify_all();
    }
  }
  listeners_.notify(changes);
}

std::unique_ptr<RouteSubscription> EtcdRouteWatcher::subscribe(RouteListener listener) {
  return listeners_.add(std::move(listener));
}

RouteChange EtcdRouteWatcher::change_of(const std::string& key, const Entry* before,
                                        const Entry* after, std::string detail) const {
  RouteChange c;
  const Entry& e = before ? *before : *after;
  c.bootstrap_addr = e.instance;
  c.engine_rank = e.engine_rank;
  if (before) c.old_endpoint = make_tcp_endpoint(before->reg.rank_ip, before->reg.rank_port);
  if (after) c.new_endpoint = make_tcp_endpoint(after->reg.rank_ip, after->reg.rank_port);
  c.detail = detail.empty() ? fmt::format("its key {} in {} names {}", key, client_->description(),
                                          c.new_endpoint)
                            : std::move(detail);
  return c;
}

EtcdRouteWatcher::Applied EtcdRouteWatcher::apply(const EtcdKeyValue& kv, bool deleted,
                                                  std::vector<RouteChange>& changes) {
  auto before = entries_.find(kv.key);
  rejected_.erase(kv.key);  // noted again below if this value is rejected too
  if (deleted) {
    if (before == entries_.end()) return Applied::kIgnored;
    changes.push_back(change_of(
        kv.key, &before->second, nullptr,
        fmt::format("its key {} was deleted from {} (the rank shut down, or its lease was "
                    "revoked or expired)",
                    kv.key, client_->description())));
    entries_.erase(before);
    return Applied::kTaken;
  }
  std::optional<EtcdRankKey> key = parse_etcd_rank_key(prefix_, kv.key);
  if (!key) return Applied::kIgnored;
  Result<OpenedRouteEntry> opened = open_sealed_route_entry(key_.get(), kv, unix_now_ms());
  SealStamp stamp;
  Result<bootstrap::PrefillRegistration> reg = opened.status();
  if (opened.ok()) {
    stamp = opened->stamp;
    reg = std::move(opened->reg);
  }
  if (reg.ok() && reg->engine_rank != key->engine_rank)
    reg = invalid_argument("engine_rank differs from the key's");
  if (reg.ok() && key_) {
    // A run older than one already seen here is a crashed run's entry put back (its
    // lease kept alive by someone): never followed.
    auto newest = newest_run_.find(kv.key);
    if (newest != newest_run_.end() && (stamp.started_ms < newest->second.started_ms ||
                                        (stamp.started_ms == newest->second.started_ms &&
                                         stamp.incarnation != newest->second.incarnation))) {
      reg = unauthenticated(fmt::format(
          "the entry is from an earlier run of its owner (incarnation {:016x}) than one "
          "already seen (incarnation {:016x}): a dead rank's entry put back",
          stamp.incarnation, newest->second.incarnation));
    } else if (newest != newest_run_.end()) {
      newest->second = stamp;
    } else if (newest_run_.size() < kMaxEtcdRouteEntries) {
      newest_run_[kv.key] = stamp;
    }
  }
  if (!reg.ok()) {
    // Whoever can write to etcd can write here: every line is rate-limited.
    if (key_) {
      // With a secret, what does not verify is not the owner's: never followed. The
      // owner's last verified entry stays until the owner puts it back (or is gone).
      PDKV_LOG_WARN_LIMITED(
          "etcd registry: ignoring entry {} in {}: {}{}", kv.key, client_->description(),
          reg.status().message(),
          before == entries_.end() ? "" : "; keeping the owner's last verified entry meanwhile");
      if (before != entries_.end()) before->second.contested = true;
      if (rejected_.size() < kMaxEtcdRouteEntries) rejected_[kv.key] = reg.status().message();
      return Applied::kRejected;
    }
    PDKV_LOG_WARN_LIMITED("etcd registry: ignoring malformed entry {}: {}", kv.key,
                          reg.status().to_string());
    if (before == entries_.end()) return Applied::kIgnored;
    changes.push_back(change_of(kv.key, &before->second, nullptr,
                                fmt::format("its key {} in {} now holds a malformed entry", kv.key,
                                            client_->description())));
    entries_.erase(before);
    return Applied::kTaken;
  }
  if (entries_.size() >= kMaxEtcdRouteEntries && before == entries_.end()) {
    PDKV_LOG_WARN_LIMITED("etcd registry: more than {} entries under {}; ignoring {}",
                          kMaxEtcdRouteEntries, prefix_, kv.key);
    return Applied::kIgnored;
  }
  Entry after{std::move(key->instance), key->engine_rank, std::move(*reg), kv.lease, false, stamp};
  RouteChange c =
      change_of(kv.key, before == entries_.end() ? nullptr : &before->second, &after, "");
  if (c.old_endpoint != c.new_endpoint) changes.push_back(std::move(c));
  entries_[kv.key] = std::move(after);
  return Applied::kTaken;
}

void EtcdRouteWatcher::reload(const std::vector<EtcdKeyValue>& kvs,
                              std::vector<RouteChange>& changes) {
  std::map<std::string, Entry> before = std::move(entries_);
  entries_.clear();
  rejected_.clear();
  std::vector<RouteChange> ignored;  // compared below, against what the mirror held
  for (const EtcdKeyValue& kv : kvs) {
    if (apply(kv, false, ignored) != Applied::kRejected) continue;
    // Rewritten while the watch was down: keep the owner's entry, as an event would have.
    auto old = before.find(kv.key);
    if (old == before.end()) continue;
    Entry kept = old->second;
    kept.contested = true;
    entries_[kv.key] = std::move(kept);
  }
  for (const auto& [key, old] : before) {
    auto now_there = entries_.find(key);
    if (now_there == entries_.end()) {
      // Deleted while the watch was down: its delete event was never seen.
      changes.push_back(change_of(
          key, &old, nullptr,
          fmt::format("its key {} was gone from {} when the watch read it again (the rank shut "
                      "down, or its lease was revoked or expired, meanwhile)",
                      key, client_->description())));
      continue;
    }
    RouteChange c = change_of(key, &old, &now_there->second, "");
    if (c.old_endpoint != c.new_endpoint) changes.push_back(std::move(c));
  }
  for (const auto& [key, added] : entries_) {
    if (!before.count(key)) changes.push_back(change_of(key, nullptr, &added, ""));
  }
}

void EtcdRouteWatcher::run() {
  const std::string watched = etcd_instances_prefix(prefix_);
  auto backoff = std::chrono::milliseconds(50);
  while (!stopping_) {
    Result<EtcdRange> range = client_->range_prefix(watched, now() + std::chrono::seconds(2));
    Status ended;
    if (range.ok()) {
      EtcdClient::WatchStream* stream = nullptr;
      std::vector<RouteChange> reloaded;
      {
        MutexLock lock(mu_);
        if (stopping_) break;
        reload(range->kvs, reloaded);
        stream_ = client_->watch(watched, range->revision + 1);
        stream = stream_.get();  // replaced only by this thread
      }
      // The read is etcd's state at its revision: a rank missing from it is gone, whether
      // or not the watch that follows comes up.
      listeners_.notify(reloaded);
      ended = stream->run(
          [this] {
            MutexLock lock(mu_);
            synced_ = true;
            changed_.notify_all();
          },
          [this](int64_t, const std::vector<EtcdEvent>& events) {
            std::vector<RouteChange> changes;
            {
              MutexLock lock(mu_);
              for (const EtcdEvent& e : events) apply(e.kv, e.deleted, changes);
              changed_.notify_all();
            }
            listeners_.notify(changes);
          });
    } else {
      ended = range.status();
    }
    MutexLock lock(mu_);
    if (synced_) backoff = std::chrono::milliseconds(50);  // it worked: retry at once
    synced_ = false;
    last_error_ = ended.message();
    changed_.notify_all();
    if (stopping_) break;
    PDKV_LOG_DEBUG("etcd registry: watch of {} ended: {}", watched, ended.to_string());
    changed_.wait_for(mu_, backoff, [this] { return stopping_.load(); });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

const bootstrap::InstanceLayout* EtcdRouteWatcher::layout_of(const std::string& instance) const {
  auto it = entries_.lower_bound(etcd_instance_prefix(prefix_, instance));
  if (it == entries_.end() || it->second.instance != instance) return nullptr;
  return &it->second.reg.layout;
}

std::string EtcdRouteWatcher::rejected_note(const std::string& prefix) const {
  auto it = rejected_.lower_bound(prefix);
  if (it == rejected_.end() || it->first.compare(0, prefix.size(), prefix) != 0) return "";
  return fmt::format(
      "; {} holds an entry that was ignored: {} (a rank without this cluster's secret, or a "
      "write by someone else)",
      it->first, it->second);
}

std::string EtcdRouteWatcher::unsynced_reason() const {
  return fmt::format("{} not reachable ({})", client_->description(), last_error_);
}

Result<bootstrap::InstanceLayout> EtcdRouteWatcher::wait_for_instance(const std::string& instance,
                                                                      TimePoint deadline,
                                                                      const Interrupt* interrupt) {
  // Declared before the lock: it takes the interrupt's lock, then ours (wake()).
  Interrupt::Hook wake(interrupt, [this] { wake_waiters(); });
  MutexLock lock(mu_);
  changed_.wait_until(mu_, deadline, [&]() PDKV_REQUIRES(mu_) {
    return stopping_.load() || interrupted(interrupt) ||
           (synced_ && layout_of(instance) != nullptr);
  });
  if (synced_ && layout_of(instance) != nullptr) return *layout_of(instance);
  if (interrupted(interrupt)) return aborted("lookup of instance " + instance + " interrupted");
  if (!synced_) return deadline_exceeded(unsynced_reason());
  const std::string keys = etcd_instance_prefix(prefix_, instance);
  return deadline_exceeded(
      fmt::format("no prefill rank of instance {} is registered in {} "
                  "(keys {}*){}",
                  instance, client_->description(), keys, rejected_note(keys)));
}

Result<bootstrap::PrefillRegistration> EtcdRouteWatcher::wait_for_rank(const std::string& instance,
                                                                       int64_t dp_group,
                                                                       int64_t tp_rank,
                                                                       TimePoint deadline,
                                                                       const Interrupt* interrupt) {
  Interrupt::Hook wake(interrupt, [this] { wake_waiters(); });
  MutexLock lock(mu_);
  std::string key;
  Status out_of_layout;
  auto found = [&]() PDKV_REQUIRES(mu_) -> const Entry* {
    if (!synced_) return nullptr;
    const bootstrap::InstanceLayout* layout = layout_of(instance);
    if (layout == nullptr) return nullptr;
    const int64_t p = layout->tp_size_per_dp();
    if (dp_group < 0 || dp_group >= layout->dp_size || tp_rank < 0 || tp_rank >= p) {
      out_of_layout = out_of_range(fmt::format(
          "prefill rank (dp group {}, tp rank {}) is outside instance {}'s layout ({} x {})",
          dp_group, tp_rank, instance, layout->dp_size, p));
      return nullptr;
    }
    key = etcd_rank_key(prefix_, instance, dp_group * p + tp_rank);
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  };
  changed_.wait_until(mu_, deadline, [&]() PDKV_REQUIRES(mu_) {
    return stopping_.load() || interrupted(interrupt) || found() != nullptr || !out_of_layout.ok();
  });
  if (const Entry* e = found()) return e->reg;
  if (!out_of_layout.ok()) return out_of_layout;
  if (interrupted(interrupt)) return aborted("lookup of instance " + instance + " interrupted");
  if (!synced_) return deadline_exceeded(unsynced_reason());
  // The rank's own key when the layout is known (exactly: ranks/1 is no prefix of ours
  // for ranks/10), else any key of the instance.
  std::string note;
  if (key.empty()) {
    note = rejected_note(etcd_instance_prefix(prefix_, instance));
  } else if (rejected_.count(key) != 0) {
    note = rejected_note(key);
  }
  return deadline_exceeded(fmt::format(
      "prefill rank (dp group {}, tp rank {}) of instance {} is not registered in {} (key {}){}",
      dp_group, tp_rank, instance, client_->description(),
      key.empty() ? etcd_instance_prefix(prefix_, instance) + "*" : key, note));
}

std::optional<EtcdRouteWatcher::Snapshot> EtcdRouteWatcher::snapshot(std::string* why) const {
  MutexLock lock(mu_);
  if (!synced_) {
    if (why) *why = unsynced_reason();
    return std::nullopt;
  }
  Snapshot out;
  for (const auto& [key, e] : entries_) out[e.instance][e.engine_rank] = e.reg;
  return out;
}

}  // namespace pdkv::kv
