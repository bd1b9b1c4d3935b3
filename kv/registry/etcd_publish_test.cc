// The etcd registry's routes against real etcd members (kv/registry/testing/etcd_cluster.h):
// published ranks, their withdrawal seen by the watch, lookups that wait, layout conflicts
// (racing ones too), the keep-alive that holds a route past its TTL, malformed entries.
#include <gtest/gtest.h>

#include <iostream>
#include <latch>
#include <thread>

#include "kv/registry/etcd_client.h"
#include "kv/registry/etcd_route_keys.h"
#include "kv/registry/testing/etcd_registry_fixture.h"

// In kv::testing, whose helpers (etcd_registry_fixture.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using namespace std::chrono_literals;

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

}  // namespace
}  // namespace pdkv::kv::testing
