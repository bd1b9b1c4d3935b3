// Routes rewritten in etcd by someone who is not their owner, against real etcd members:
// with a cluster secret the decode never follows the rewrite and the owner puts its sealed
// entry back; without one the rewrite is followed until then (the documented gap).
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/mutex.h"
#include "kv/registry/etcd_client.h"
#include "kv/registry/etcd_route_keys.h"
#include "kv/registry/etcd_route_seal.h"
#include "kv/registry/registry_http_server.h"
#include "kv/registry/testing/etcd_registry_fixture.h"

// In kv::testing, whose helpers (etcd_registry_fixture.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using namespace std::chrono_literals;

// The attacker: a plain etcd client in a process of its own (etcdctl, the value on its
// stdin), putting without a lease as anyone allowed to write to etcd could. Without
// etcdctl the test's own client does the same put.
void attacker_put(const EtcdCluster& cluster, const std::string& key, const std::string& value) {
  if (access("/usr/bin/etcdctl", X_OK) == 0) {
    const std::string cmd = "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=" + cluster.endpoints() +
                            " put '" + key + "' >/dev/null";
    FILE* p = popen(cmd.c_str(), "w");
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(std::fwrite(value.data(), 1, value.size(), p), value.size());
    ASSERT_EQ(pclose(p), 0) << cmd;
    return;
  }
  auto client = EtcdClient::create(cluster.endpoints());
  ASSERT_TRUE(client.ok());
  // A guard no write can fail: an unconditional put.
  ASSERT_TRUE((*client)->put_if_unchanged(key, int64_t{1} << 40, key, value, 0, now() + 2s).ok());
}

std::optional<EtcdKeyValue> read_key(const EtcdCluster& cluster, const std::string& key) {
  auto client = EtcdClient::create(cluster.endpoints());
  if (!client.ok()) return std::nullopt;
  auto range = (*client)->range_prefix(key, now() + 2s);
  if (!range.ok()) return std::nullopt;
  for (const EtcdKeyValue& kv : range->kvs) {
    if (kv.key == key) return kv;
  }
  return std::nullopt;
}

// Every route change a decode's subscribers hear, for checking none named the attacker.
struct HeardChanges {
  Mutex mu;
  std::vector<RouteChange> changes PDKV_GUARDED_BY(mu);
  RouteListener listener() {
    return [this](const RouteChange& change) {
      MutexLock lock(mu);
      changes.push_back(change);
    };
  }
  std::vector<RouteChange> all() {
    MutexLock lock(mu);
    return changes;
  }
};

constexpr char kAttacker[] = "tcp://127.0.0.1:6666";
using Duration = TimePoint::duration;

// With a cluster secret the publisher seals its entry; an attacker rewrites it in etcd
// twice: a plain route to its own address, then the owner's own sealed entry put again
// without the owner's lease (a replay). The decode never resolves the attacker's address
// nor drops the rank (its lookups and the HTTP view keep answering the owner's), and the
// owner puts its entry back, sealed and under its lease, within a bounded time.
TEST_F(EtcdRegistryTest, RewrittenRouteIsNeverFollowedWithASecretAndItsOwnerPutsItBack) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  const auto key = test_secret();
  const RegistryOptions options = etcd_options(*cluster, "/sealed");
  auto prefill = directory(options, key);
  auto decode = directory(options, key);
  ASSERT_TRUE(prefill->register_prefill_rank("s:1", rank_info(0, 1, 5000), now() + 5s).ok());
  auto first = decode->lookup_prefill_rank("s:1", 0, 0, now() + 5s);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->control_endpoint, "tcp://127.0.0.1:5000");
  HeardChanges heard;
  auto subscription = decode->subscribe(heard.listener());
  auto view = RegistryHttpServer::start(decode->watcher(), "s:1", "127.0.0.1", 0);
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  httplib::Client http("127.0.0.1", (*view)->port());

  const std::string rank_key = etcd_rank_key("/sealed", "s:1", 0);
  const std::optional<EtcdKeyValue> original = read_key(*cluster, rank_key);
  ASSERT_TRUE(original.has_value());
  EXPECT_NE(original->lease, 0);
  const nlohmann::json stored = nlohmann::json::parse(original->value, nullptr, false);
  ASSERT_TRUE(stored.is_object() && stored.contains("mac") && stored.contains("route"))
      << original->value;
  EXPECT_EQ(stored["route"].get<std::string>(), route_json(rank_info(0, 1, 5000)));

  const std::vector<std::pair<const char*, std::string>> attacks = {
      {"a plain route to the attacker", route_json(rank_info(0, 1, 6666))},
      {"the owner's sealed entry without its lease", original->value},
  };
  for (const auto& [what, value] : attacks) {
    SCOPED_TRACE(what);
    const TimePoint attacked = now();
    attacker_put(*cluster, rank_key, value);
    // Until the owner has put its entry back, and a while after: the decode and the
    // HTTP view answer the owner's address, never the attacker's, never "missing".
    std::optional<Duration> repaired;
    while (now() - attacked < 3s) {
      auto rank = decode->lookup_prefill_rank("s:1", 0, 0, now() + 200ms);
      ASSERT_TRUE(rank.ok()) << rank.status().to_string();
      ASSERT_EQ(rank->control_endpoint, "tcp://127.0.0.1:5000");
      auto got = http.Get("/route?engine_rank=0&target_dp_group=0");
      ASSERT_TRUE(got && got->status == 200) << (got ? got->body : "no answer");
      EXPECT_EQ(nlohmann::json::parse(got->body)["rank_port"], 5000) << got->body;
      const std::optional<EtcdKeyValue> now_there = read_key(*cluster, rank_key);
      if (!repaired && now_there && now_there->value == original->value &&
          now_there->lease == original->lease)
        repaired = now() - attacked;
      if (repaired && now() - attacked > *repaired + 300ms) break;
      std::this_thread::sleep_for(20ms);
    }
    // The keep-alive reads back its entry with every renewal (TTL 2 s / 3).
    ASSERT_TRUE(repaired.has_value()) << "the owner did not put its entry back within 3 s";
    EXPECT_LT(*repaired, 2s);
    std::cout << "[ INFO ] " << what << ": put back after "
              << std::chrono::duration_cast<std::chrono::milliseconds>(*repaired).count()
              << " ms\n";
  }
  for (const RouteChange& c : heard.all()) {
    EXPECT_NE(c.new_endpoint, kAttacker) << c.detail;
    EXPECT_FALSE(c.new_endpoint.empty()) << "the rank was dropped: " << c.detail;
  }
}

// A verified entry rewritten after its owner died (so no one puts it back) is not kept
// forever: the decode keeps the owner's entry only while the owner's lease lives, then
// the rank vanishes as it would have with its key. The attacker's route is never taken.
TEST_F(EtcdRegistryTest, RewrittenRouteOfAnOwnerThatIsGoneVanishesWithTheOwnersLease) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  const auto key = test_secret();
  auto decode = directory(etcd_options(*cluster, "/sealed"), key);
  // The owner, by hand: a lease and its sealed entry under it.
  auto owner = EtcdClient::create(cluster->endpoints());
  ASSERT_TRUE(owner.ok());
  auto lease = (*owner)->grant_lease(30, now() + 2s);
  ASSERT_TRUE(lease.ok());
  const std::string rank_key = etcd_rank_key("/sealed", "g:1", 0);
  ASSERT_TRUE((*owner)
                  ->put_if_unchanged(rank_key, 0, rank_key,
                                     seal_route_entry(key.get(), rank_key, *lease,
                                                      route_json(rank_info(0, 1, 5000))),
                                     *lease, now() + 2s)
                  .ok());
  auto first = decode->lookup_prefill_rank("g:1", 0, 0, now() + 5s);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  HeardChanges heard;
  auto subscription = decode->subscribe(heard.listener());

  attacker_put(*cluster, rank_key, route_json(rank_info(0, 1, 6666)));
  std::this_thread::sleep_for(300ms);
  auto kept = decode->lookup_prefill_rank("g:1", 0, 0, now() + 200ms);
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  EXPECT_EQ(kept->control_endpoint, "tcp://127.0.0.1:5000");
  // The owner dies: its lease ends, the poisoned key (no lease) stays in etcd.
  const TimePoint died = now();
  ASSERT_TRUE((*owner)->revoke_lease(*lease, now() + 2s).ok());
  ASSERT_TRUE(read_key(*cluster, rank_key).has_value());
  bool gone = false;
  while (!gone && now() - died < 4s) {
    auto snap = decode->watcher().snapshot();
    gone = snap && (*snap)["g:1"].count(0) == 0;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(gone) << "the decode still holds the dead owner's route";
  EXPECT_LT(now() - died, 3s);
  auto lookup = decode->lookup_prefill_rank("g:1", 0, 0, now() + 200ms);
  EXPECT_EQ(lookup.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(lookup.status().message().find("holds an entry that was ignored"), std::string::npos)
      << lookup.status().message();
  const std::vector<RouteChange> changes = heard.all();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].new_endpoint.empty());
  EXPECT_NE(changes[0].detail.find("does not verify"), std::string::npos) << changes[0].detail;
}

// Without a secret readers cannot tell a rewritten route from its owner's: the decode
// follows the attacker until the owner puts its entry back (the gap docs/SECURITY.md
// lists; etcd's access control must keep writers out). The owner still repairs it, and
// the poisoned unleased key becomes the owner's leased one again.
TEST_F(EtcdRegistryTest, WithoutASecretARewrittenRouteIsFollowedUntilItsOwnerPutsItBack) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  const RegistryOptions options = etcd_options(*cluster, "/plain");
  auto prefill = directory(options);
  auto decode = directory(options);
  ASSERT_TRUE(prefill->register_prefill_rank("p:1", rank_info(0, 1, 5000), now() + 5s).ok());
  ASSERT_TRUE(decode->lookup_prefill_rank("p:1", 0, 0, now() + 5s).ok());
  const std::string rank_key = etcd_rank_key("/plain", "p:1", 0);
  const std::optional<EtcdKeyValue> original = read_key(*cluster, rank_key);
  ASSERT_TRUE(original.has_value());
  EXPECT_EQ(original->value, route_json(rank_info(0, 1, 5000)));  // unsealed, as before
  HeardChanges heard;
  auto subscription = decode->subscribe(heard.listener());

  const TimePoint attacked = now();
  attacker_put(*cluster, rank_key, route_json(rank_info(0, 1, 6666)));
  std::optional<Duration> repaired;
  while (!repaired && now() - attacked < 3s) {
    const std::optional<EtcdKeyValue> now_there = read_key(*cluster, rank_key);
    if (now_there && now_there->value == original->value && now_there->lease == original->lease)
      repaired = now() - attacked;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(repaired.has_value()) << "the owner did not put its entry back within 3 s";
  EXPECT_LT(*repaired, 2s);
  auto back = decode->lookup_prefill_rank("p:1", 0, 0, now() + 1s);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->control_endpoint, "tcp://127.0.0.1:5000");
  bool followed = false;
  for (const RouteChange& c : heard.all()) followed |= c.new_endpoint == kAttacker;
  EXPECT_TRUE(followed) << "expected the gap: a reader without the secret follows the rewrite";
}

// With a secret the layout check, like every reader, ignores entries that do not verify:
// an attacker's entry with another layout under a rank key blocks no rank.
TEST_F(EtcdRegistryTest, UnsignedEntryWithAnotherLayoutDoesNotBlockARankWithASecret) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  const auto key = test_secret();
  PrefillRankInfo other = rank_info(1, 2, 6666);
  other.layout.head_dim = 128;
  attacker_put(*cluster, etcd_rank_key("/sealed", "b:1", 1), route_json(other));
  auto prefill = directory(etcd_options(*cluster, "/sealed"), key);
  Status registered = prefill->register_prefill_rank("b:1", rank_info(0, 2, 5000), now() + 5s);
  EXPECT_TRUE(registered.ok()) << registered.to_string();
  auto decode = directory(etcd_options(*cluster, "/sealed"), key);
  auto rank0 = decode->lookup_prefill_rank("b:1", 0, 0, now() + 5s);
  ASSERT_TRUE(rank0.ok()) << rank0.status().to_string();
  EXPECT_EQ(rank0->layout.head_dim, 64u);
  // Rank 1 is not registered; the failure says its key holds an entry that was ignored
  // (what an operator sees when a rank runs without the secret).
  Status missing = decode->lookup_prefill_rank("b:1", 0, 1, now() + 300ms).status();
  EXPECT_EQ(missing.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.message().find(etcd_rank_key("/sealed", "b:1", 1) +
                                   " holds an entry that was ignored: the entry is not signed"),
            std::string::npos)
      << missing.message();
}

}  // namespace
}  // namespace pdkv::kv::testing
