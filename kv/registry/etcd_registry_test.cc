// The etcd registry against real etcd members (kv/registry/testing/etcd_cluster.h):
// publish, watch, revoke, layout conflicts, keep-alive, etcd down and back, leader loss,
// and routes rewritten in etcd by someone who is not their owner.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <latch>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/cluster_key.h"
#include "common/mutex.h"
#include "kv/registry/etcd_client.h"
#include "kv/registry/etcd_route_directory.h"
#include "kv/registry/etcd_route_keys.h"
#include "kv/registry/etcd_route_seal.h"
#include "kv/registry/registry_http_server.h"
#include "kv/registry/testing/etcd_cluster.h"
#include "kv/route/bootstrap_route_directory.h"

namespace pdkv::kv {
namespace {

using namespace std::chrono_literals;
using testing::EtcdCluster;

PrefillRankInfo rank_info(int64_t engine_rank, int64_t tp_size, int port) {
  PrefillRankInfo info;
  info.engine_rank = engine_rank;
  info.tp_size = tp_size;
  info.dp_size = 1;
  info.control_endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  info.layout.page_size = 16;
  info.layout.kv_head_num = 8 / static_cast<uint32_t>(tp_size);
  info.layout.total_kv_head_num = 8;
  info.layout.head_dim = 64;
  info.layout.dtype_bytes = 2;
  info.kv_item_lens = {4096, 4096};
  return info;
}

RegistryOptions etcd_options(const EtcdCluster& cluster, const std::string& prefix = "/test") {
  RegistryOptions o;
  o.kind = RegistryKind::kEtcd;
  o.etcd_endpoints = cluster.endpoints();
  o.etcd_prefix = prefix;
  o.etcd_lease_ttl_s = 2;
  return o;
}

std::shared_ptr<EtcdRouteDirectory> directory(const RegistryOptions& o,
                                              std::shared_ptr<const ClusterKey> key = nullptr) {
  auto d = EtcdRouteDirectory::create(o, std::move(key));
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return *d;
}

class EtcdRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdCluster::binary().empty()) GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd)";
  }
  std::unique_ptr<EtcdCluster> start(int members) {
    auto c = EtcdCluster::start(members);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? std::move(*c) : nullptr;
  }
  // start(members), then a prefill's and a decode's directory over it under /test.
  void start_with_directories(int members) {
    cluster_ = start(members);
    ASSERT_NE(cluster_, nullptr);
    prefill_ = directory(etcd_options(*cluster_));
    decode_ = directory(etcd_options(*cluster_));
  }

  // Declared in the order the tests' locals were, so destroyed in the same order.
  std::unique_ptr<EtcdCluster> cluster_;
  std::shared_ptr<EtcdRouteDirectory> prefill_;
  std::shared_ptr<EtcdRouteDirectory> decode_;
};

TEST_F(EtcdRegistryTest, DecodeSeesPublishedRanksAndTheirWithdrawal) {
  ASSERT_NO_FATAL_FAILURE(start_with_directories(1));
  ASSERT_TRUE(prefill_->register_prefill_rank("inst:1", rank_info(0, 2, 5000), now() + 5s).ok());
  ASSERT_TRUE(prefill_->register_prefill_rank("inst:1", rank_info(1, 2, 5001), now() + 5s).ok());

  auto instance = decode_->lookup_instance("inst:1", now() + 5s);
  ASSERT_TRUE(instance.ok()) << instance.status().to_string();
  EXPECT_EQ(instance->tp_size, 2);
  auto rank1 = decode_->lookup_prefill_rank("inst:1", 0, 1, now() + 5s);
  ASSERT_TRUE(rank1.ok()) << rank1.status().to_string();
  EXPECT_EQ(rank1->control_endpoint, "tcp://127.0.0.1:5001");
  EXPECT_EQ(decode_->lookup_prefill_rank("inst:1", 0, 2, now() + 1s).status().code(),
            StatusCode::kOutOfRange);

  // A clean shutdown withdraws the route; the watch reports it without polling.
  ASSERT_TRUE(prefill_->unregister_prefill_rank("inst:1", rank_info(1, 2, 5001), now() + 2s).ok());
  const TimePoint deadline = now() + 1s;
  bool gone = false;
  while (!gone && now() < deadline) {
    auto snap = decode_->watcher().snapshot();
    gone = snap && (*snap)["inst:1"].count(1) == 0;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone);
  auto missing = decode_->lookup_prefill_rank("inst:1", 0, 1, now() + 300ms);
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("not registered in etcd at"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find("/test/instances/inst:1/ranks/1"), std::string::npos);
}

TEST_F(EtcdRegistryTest, LookupWaitsForARankThatRegistersLater) {
  ASSERT_NO_FATAL_FAILURE(start_with_directories(1));
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    EXPECT_TRUE(prefill_->register_prefill_rank("late:1", rank_info(0, 1, 6000), now() + 5s).ok());
  });
  auto rank = decode_->lookup_prefill_rank("late:1", 0, 0, now() + 5s);
  late.join();
  ASSERT_TRUE(rank.ok()) << rank.status().to_string();
  EXPECT_EQ(rank->control_endpoint, "tcp://127.0.0.1:6000");
}

TEST_F(EtcdRegistryTest, LayoutConflictBetweenRanksIsRefused) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  auto a = directory(etcd_options(*cluster));
  auto b = directory(etcd_options(*cluster));
  ASSERT_TRUE(a->register_prefill_rank("c:1", rank_info(0, 2, 5000), now() + 5s).ok());
  PrefillRankInfo other = rank_info(1, 2, 5001);
  other.layout.head_dim = 128;
  Status refused = b->register_prefill_rank("c:1", other, now() + 5s);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("head_dim"), std::string::npos) << refused.message();
  // Nothing changed: rank 1 is not registered.
  EXPECT_FALSE(b->lookup_prefill_rank("c:1", 0, 1, now() + 300ms).ok());
  // A lone rank may come back with another layout (as the HTTP server allows).
  PrefillRankInfo changed = rank_info(0, 2, 5000);
  changed.layout.head_dim = 128;
  EXPECT_TRUE(a->register_prefill_rank("c:1", changed, now() + 5s).ok());
}

// Two ranks of one instance registering conflicting layouts at the same moment, each
// through its own client (two processes): the guarded put lets exactly one in, and the
// other is refused naming the field, every round.
TEST_F(EtcdRegistryTest, RacingRanksWithConflictingLayoutsExactlyOneWins) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  auto a = directory(etcd_options(*cluster));
  auto b = directory(etcd_options(*cluster));
  auto reader = EtcdClient::create(cluster->endpoints());
  ASSERT_TRUE(reader.ok());
  PrefillRankInfo wide = rank_info(0, 2, 5000);
  PrefillRankInfo narrow = rank_info(1, 2, 5001);
  narrow.layout.head_dim = 128;
  constexpr int kRounds = 12;
  int a_won = 0;
  for (int round = 0; round < kRounds; ++round) {
    const std::string instance = "race:" + std::to_string(round);
    std::latch start_together(2);
    Status sa, sb;
    auto racer = [&](EtcdRouteDirectory& d, const PrefillRankInfo& info, Status& out) {
      start_together.arrive_and_wait();
      out = d.register_prefill_rank(instance, info, now() + 5s);
    };
    std::thread ta(racer, std::ref(*a), std::cref(wide), std::ref(sa));
    std::thread tb(racer, std::ref(*b), std::cref(narrow), std::ref(sb));
    ta.join();
    tb.join();
    ASSERT_NE(sa.ok(), sb.ok()) << "round " << round << ": " << sa.to_string() << " / "
                                << sb.to_string();
    const Status& refused = sa.ok() ? sb : sa;
    EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.to_string();
    EXPECT_NE(refused.message().find("head_dim"), std::string::npos) << refused.message();
    a_won += sa.ok() ? 1 : 0;
    // etcd holds the winner's entry alone.
    auto range = (*reader)->range_prefix(etcd_instance_prefix("/test", instance), now() + 2s);
    ASSERT_TRUE(range.ok()) << range.status().to_string();
    ASSERT_EQ(range->kvs.size(), 1u) << "round " << round;
    EXPECT_EQ(range->kvs[0].key, etcd_rank_key("/test", instance, sa.ok() ? 0 : 1));
  }
  std::cout << "[ INFO ] the first rank won " << a_won << " of " << kRounds << " races\n";
}

TEST_F(EtcdRegistryTest, KeepAliveHoldsTheRouteBeyondItsTtlAndRevokeEndsIt) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  auto reader = EtcdClient::create(cluster->endpoints());
  ASSERT_TRUE(reader.ok());
  const std::string key = etcd_rank_key("/test", "k:1", 0);
  {
    auto prefill = directory(etcd_options(*cluster));
    ASSERT_TRUE(prefill->register_prefill_rank("k:1", rank_info(0, 1, 5000), now() + 5s).ok());
    std::this_thread::sleep_for(3500ms);  // TTL 2 s: renewed, not expired
    auto range = (*reader)->range_prefix(key, now() + 2s);
    ASSERT_TRUE(range.ok());
    EXPECT_EQ(range->kvs.size(), 1u);
    EXPECT_NE(range->kvs[0].lease, 0);
  }  // destroyed without unregister: the publisher revokes its lease
  auto range = (*reader)->range_prefix(key, now() + 2s);
  ASSERT_TRUE(range.ok());
  EXPECT_TRUE(range->kvs.empty());
}

TEST_F(EtcdRegistryTest, MalformedEntriesAreIgnored) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  auto writer = EtcdClient::create(cluster->endpoints());
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)
                  ->put_if_unchanged("/test/instances/", 1 << 30,
                                     etcd_rank_key("/test", "bad:1", 0),
                                     "{\"engine_rank\": \"zero\"}", 0, now() + 2s)
                  .ok());
  auto decode = directory(etcd_options(*cluster));
  EXPECT_EQ(decode->lookup_instance("bad:1", now() + 500ms).status().code(),
            StatusCode::kDeadlineExceeded);
}

TEST_F(EtcdRegistryTest, EtcdDownFailsLookupsNamingEtcdAndRecovers) {
  ASSERT_NO_FATAL_FAILURE(start_with_directories(1));
  ASSERT_TRUE(prefill_->register_prefill_rank("d:1", rank_info(0, 1, 5000), now() + 5s).ok());
  ASSERT_TRUE(decode_->lookup_prefill_rank("d:1", 0, 0, now() + 5s).ok());

  cluster_->kill(0);
  // The watch learns it from the closed connection.
  for (TimePoint until = now() + 2s; decode_->watcher().snapshot() && now() < until;)
    std::this_thread::sleep_for(10ms);
  std::string why;
  EXPECT_FALSE(decode_->watcher().snapshot(&why).has_value());
  EXPECT_NE(why.find("etcd at"), std::string::npos) << why;
  const TimePoint start = now();
  auto down = decode_->lookup_prefill_rank("d:1", 0, 0, now() + 1s);
  EXPECT_LT(now() - start, 1500ms);  // fails at its deadline, no hang
  EXPECT_EQ(down.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(down.status().message().find("etcd at"), std::string::npos) << down.status().message();

  // Down longer than the TTL: the lease is gone after the restart; the publisher
  // registers again, and the decode's watch comes back.
  std::this_thread::sleep_for(2500ms);
  ASSERT_TRUE(cluster_->restart(0).ok());
  auto back = decode_->lookup_prefill_rank("d:1", 0, 0, now() + 10s);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->control_endpoint, "tcp://127.0.0.1:5000");
}

TEST_F(EtcdRegistryTest, LeaderLossDoesNotFailPublishOrLookup) {
  ASSERT_NO_FATAL_FAILURE(start_with_directories(3));
  ASSERT_TRUE(prefill_->register_prefill_rank("l:1", rank_info(0, 2, 5000), now() + 5s).ok());
  ASSERT_TRUE(decode_->lookup_prefill_rank("l:1", 0, 0, now() + 5s).ok());
  auto leader = cluster_->leader();
  ASSERT_TRUE(leader.ok()) << leader.status().to_string();
  cluster_->kill(*leader);
  // New registrations and lookups go on through the surviving members.
  Status published = prefill_->register_prefill_rank("l:1", rank_info(1, 2, 5001), now() + 10s);
  ASSERT_TRUE(published.ok()) << published.to_string();
  auto rank1 = decode_->lookup_prefill_rank("l:1", 0, 1, now() + 10s);
  ASSERT_TRUE(rank1.ok()) << rank1.status().to_string();
  EXPECT_EQ(rank1->control_endpoint, "tcp://127.0.0.1:5001");
  // The lease survives the election: rank 0 stays registered past its TTL.
  std::this_thread::sleep_for(2500ms);
  EXPECT_TRUE(decode_->lookup_prefill_rank("l:1", 0, 0, now() + 1s).ok());
}

// Sanitizer builds run several times slower and, in CI, beside other heavy tests: the
// frozen-member test scales its lease and bounds by this (it failed once under TSan in a
// full parallel run, never alone).
#if defined(__has_feature)
#define PDKV_TEST_HAS_FEATURE(x) __has_feature(x)
#else
#define PDKV_TEST_HAS_FEATURE(x) 0
#endif
constexpr int kSlow =
    PDKV_TEST_HAS_FEATURE(thread_sanitizer) || PDKV_TEST_HAS_FEATURE(address_sanitizer) ? 3 : 1;

TEST_F(EtcdRegistryTest, FrozenMemberIsLeftByTheWatchAndThePublisher) {
  auto cluster = start(3);
  ASSERT_NE(cluster, nullptr);
  RegistryOptions options = etcd_options(*cluster);
  options.etcd_lease_ttl_s = 2 * kSlow;
  auto prefill = directory(options);
  auto decode = directory(options);
  ASSERT_TRUE(
      prefill->register_prefill_rank("f:1", rank_info(0, 2, 5000), now() + 5s * kSlow).ok());
  ASSERT_TRUE(decode->lookup_prefill_rank("f:1", 0, 0, now() + 5s * kSlow).ok());
  // Both clients talk to member 0 first (it answered): freeze it, as a partition would
  // leave it, connections open and silent.
  cluster->freeze(0);
  const TimePoint frozen = now();
  Status published =
      prefill->register_prefill_rank("f:1", rank_info(1, 2, 5001), now() + 10s * kSlow);
  ASSERT_TRUE(published.ok()) << published.to_string();
  auto rank1 = decode->lookup_prefill_rank("f:1", 0, 1, now() + 10s * kSlow);
  ASSERT_TRUE(rank1.ok()) << rank1.status().to_string();
  EXPECT_LT(now() - frozen, 6s * kSlow);
  // The lease of rank 0 is renewed through the others: still there past its TTL.
  std::this_thread::sleep_for(2500ms * kSlow);
  EXPECT_TRUE(decode->lookup_prefill_rank("f:1", 0, 0, now() + 1s * kSlow).ok());
  cluster->thaw(0);
}

// ---- Routes rewritten in etcd by someone who is not their owner --------------------------

std::shared_ptr<const ClusterKey> test_secret(uint8_t fill = 7) {
  const std::vector<uint8_t> secret(32, fill);
  auto key = ClusterKey::from_secret(secret);
  EXPECT_TRUE(key.ok());
  return *key;
}

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

std::string route_json(const PrefillRankInfo& info) {
  auto reg = to_registration(info);
  EXPECT_TRUE(reg.ok());
  return bootstrap::registration_to_json(*reg);
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

// Sealed entries bind the etcd key, the lease and the secret: each change fails.
TEST(EtcdRouteSeal, EntryVerifiesOnlyForItsKeyLeaseAndSecret) {
  const auto key = test_secret();
  const std::string route = route_json(rank_info(1, 2, 5000));
  const std::string k = "/x/instances/i:1/ranks/1";
  EtcdKeyValue kv{k, seal_route_entry(key.get(), k, 42, route), 1, 42};
  auto opened = open_route_entry(key.get(), kv);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_EQ(opened->rank_port, 5000);
  EtcdKeyValue moved = kv;
  moved.key = "/x/instances/i:1/ranks/0";
  EtcdKeyValue unleased = kv;
  unleased.lease = 0;
  EtcdKeyValue plain = kv;
  plain.value = route;
  for (const EtcdKeyValue& bad : {moved, unleased, plain})
    EXPECT_EQ(open_route_entry(key.get(), bad).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(open_route_entry(test_secret(8).get(), kv).status().code(),
            StatusCode::kUnauthenticated);
  // Without a secret both forms read, unverified; garbage does not.
  EXPECT_TRUE(open_route_entry(nullptr, kv).ok());
  EXPECT_TRUE(open_route_entry(nullptr, plain).ok());
  EtcdKeyValue garbage = kv;
  garbage.value = "{\"mac\": 1}";
  EXPECT_FALSE(open_route_entry(nullptr, garbage).ok());
  EXPECT_FALSE(open_route_entry(key.get(), garbage).ok());
  EXPECT_EQ(seal_route_entry(nullptr, k, 42, route), route);
}

TEST(RegistryOptions, InstanceNamesThatWouldBreakKeysAreRefused) {
  RegistryOptions o;
  o.kind = RegistryKind::kEtcd;
  o.etcd_endpoints = "127.0.0.1:1";  // never reached: the name is checked first
  auto d = EtcdRouteDirectory::create(o);
  ASSERT_TRUE(d.ok());
  for (const char* bad : {"", "a/b", "a b", "host:1\n"}) {
    EXPECT_EQ((*d)->register_prefill_rank(bad, rank_info(0, 1, 5000), now() + 1s).code(),
              StatusCode::kInvalidArgument)
        << bad;
    EXPECT_EQ((*d)->lookup_instance(bad, now() + 1s).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(RegistryOptions, BadPrefixIsRefused) {
  setenv("PDKV_ETCD_PREFIX", "no-slash", 1);
  EXPECT_EQ(RegistryOptions::from_env().status().code(), StatusCode::kInvalidArgument);
  unsetenv("PDKV_ETCD_PREFIX");
  EXPECT_TRUE(RegistryOptions::from_env().ok());
}

}  // namespace
}  // namespace pdkv::kv
