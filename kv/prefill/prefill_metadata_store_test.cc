#include "kv/prefill/prefill_metadata_store.h"

#include <gtest/gtest.h>

#include <thread>

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;

TEST(PrefillMetadataStoreTest, PublishForUnopenedRoomLeavesNothing) {
  PrefillMetadataStore store;
  EXPECT_FALSE(store.publish(1, {42, {1, 2}}));
  EXPECT_EQ(store.size(), 0u);
}

TEST(PrefillMetadataStoreTest, FirstPublishWins) {
  PrefillMetadataStore store;
  store.open(2);
  EXPECT_TRUE(store.publish(2, {42, {7}}));
  EXPECT_FALSE(store.publish(2, {43, {}}));
  auto value = store.wait(2, now());
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(value->bootstrap_token, 42);
  EXPECT_EQ(value->spec_candidate_ids, std::vector<int32_t>{7});
}

TEST(PrefillMetadataStoreTest, WaitHasADeadline) {
  PrefillMetadataStore store;
  store.open(3);
  TimePoint before = now();
  EXPECT_FALSE(store.wait(3, now() + milliseconds(50)).has_value());
  EXPECT_GE(now() - before, milliseconds(45));
}

TEST(PrefillMetadataStoreTest, WaitWakesOnPublishAndOnClose) {
  PrefillMetadataStore store;
  store.open(4);
  std::thread publisher([&] {
    std::this_thread::sleep_for(milliseconds(20));
    store.publish(4, {5, {}});
  });
  auto value = store.wait(4, now() + milliseconds(10000));
  publisher.join();
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(value->bootstrap_token, 5);

  store.open(5);
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    store.close(5);
  });
  TimePoint before = now();
  EXPECT_FALSE(store.wait(5, now() + milliseconds(10000)).has_value());
  closer.join();
  EXPECT_LT(now() - before, milliseconds(5000));
  store.close(4);
  EXPECT_EQ(store.size(), 0u);
}

}  // namespace
}  // namespace pdkv::kv
