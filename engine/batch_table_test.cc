#include "engine/batch_table.h"

#include <gtest/gtest.h>

#include <thread>

namespace pdkv::engine {
namespace {

using std::chrono::milliseconds;

TEST(BatchTable, CompletesAndReleases) {
  BatchTable t;
  BatchId id = t.allocate();
  EXPECT_EQ(t.poll(id)->state, BatchState::kPending);
  t.complete(BatchTable::token_of(id), Status());
  EXPECT_EQ(t.poll(id)->state, BatchState::kSucceeded);
  EXPECT_TRUE(t.release(id).ok());
  EXPECT_EQ(t.poll(id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.release(id).code(), StatusCode::kNotFound);
  EXPECT_EQ(t.live_count(), 0u);
}

TEST(BatchTable, StaleIdAfterSlotReuseIsNotFound) {
  BatchTable t;
  BatchId a = t.allocate();
  t.complete(BatchTable::token_of(a), Status());
  ASSERT_TRUE(t.release(a).ok());
  BatchId b = t.allocate();
  EXPECT_EQ(a.index, b.index);
  EXPECT_NE(a.generation, b.generation);
  EXPECT_EQ(t.poll(a).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.poll(b)->state, BatchState::kPending);
  // A stale completion must not touch the new batch.
  t.complete(BatchTable::token_of(a), internal_error("stale"));
  EXPECT_EQ(t.poll(b)->state, BatchState::kPending);
  EXPECT_EQ(t.poll(BatchId{}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.poll(BatchId{999, 1}).status().code(), StatusCode::kNotFound);
}

TEST(BatchTable, FailureKeepsItsStatus) {
  BatchTable t;
  BatchId id = t.allocate();
  t.complete(BatchTable::token_of(id), unavailable("peer gone"));
  auto st = t.poll(id);
  EXPECT_EQ(st->state, BatchState::kFailed);
  EXPECT_EQ(st->error.code(), StatusCode::kUnavailable);
}

TEST(BatchTable, WaitTimesOutAsPendingAndWakesOnCompletion) {
  BatchTable t;
  BatchId id = t.allocate();
  auto r = t.wait_until(id, std::chrono::steady_clock::now() + milliseconds(20));
  EXPECT_EQ(r->state, BatchState::kPending);
  std::thread completer([&] { t.complete(BatchTable::token_of(id), Status()); });
  r = t.wait_until(id, std::chrono::steady_clock::now() + std::chrono::seconds(60));
  completer.join();
  EXPECT_EQ(r->state, BatchState::kSucceeded);
}

TEST(BatchTable, ReleasedWhilePendingIsFreedByCompletion) {
  BatchTable t;
  BatchId id = t.allocate();
  ASSERT_TRUE(t.release(id).ok());
  EXPECT_EQ(t.poll(id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.live_count(), 1u);
  t.complete(BatchTable::token_of(id), Status());
  EXPECT_EQ(t.live_count(), 0u);
}

}  // namespace
}  // namespace pdkv::engine
