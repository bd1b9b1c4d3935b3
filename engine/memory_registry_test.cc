#include "engine/memory_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace pdkv::engine {
namespace {

TEST(MemoryRegistry, RejectsZeroLengthOverflowAndOverlap) {
  MemoryRegistry r;
  EXPECT_EQ(r.add(0x1000, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.add(UINT64_MAX - 10, 100).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  EXPECT_EQ(r.add(0x1800, 0x1000).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.add(0x0800, 0x1000).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.add(0x1000, 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(r.add(0x2000, 0x10).ok());  // adjacent, not overlapping
}

TEST(MemoryRegistry, CheckIsInclusiveOfEdgesAndOverflowSafe) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  EXPECT_TRUE(r.check(0x1000, 0x1000).ok());
  EXPECT_TRUE(r.check(0x1fff, 1).ok());
  uint64_t bad = 0;
  EXPECT_EQ(r.check(0x1fff, 2, &bad).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(bad, 0x2000u);
  EXPECT_EQ(r.check(0xfff, 2, &bad).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(bad, 0xfffu);
  EXPECT_EQ(r.check(0x1800, UINT64_MAX).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.check(UINT64_MAX, 1).code(), StatusCode::kOutOfRange);
}

TEST(MemoryRegistry, BackToBackRegionsFormOneSpanButGapsDoNot) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  ASSERT_TRUE(r.add(0x2000, 0x1000).ok());
  ASSERT_TRUE(r.add(0x3001, 0x1000).ok());
  EXPECT_TRUE(r.check(0x1800, 0x1000).ok());
  uint64_t bad = 0;
  EXPECT_FALSE(r.check(0x2800, 0x1000, &bad).ok());
  EXPECT_EQ(bad, 0x3000u);
}

TEST(MemoryRegistry, RemoveMakesLaterChecksFailAndWaitsForPins) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x1000).ok());
  EXPECT_EQ(r.remove(0x1234).code(), StatusCode::kNotFound);
  std::atomic<bool> removed{false};
  std::thread remover;
  {
    MemoryRegistry::WritePin pin = r.pin();
    remover = std::thread([&] {
      EXPECT_TRUE(r.remove(0x1000).ok());
      removed = true;
    });
    // The region disappears at once even though remove() is still waiting for the pin.
    while (r.check(0x1000, 1).ok()) std::this_thread::yield();
    EXPECT_FALSE(removed.load());
  }
  remover.join();
  EXPECT_TRUE(removed.load());
  EXPECT_TRUE(r.regions().empty());
}

TEST(MemoryRegistry, CheckAllNamesFirstBadIndex) {
  MemoryRegistry r;
  ASSERT_TRUE(r.add(0x1000, 0x100).ok());
  DstRange ranges[] = {{0x1000, 0x10}, {0x1010, 0x10}, {0x10f0, 0x11}, {0x5000, 1}};
  uint64_t bad = 0;
  EXPECT_EQ(r.check_all(ranges, &bad), 2u);
  EXPECT_EQ(bad, 0x1100u);
}

}  // namespace
}  // namespace pdkv::engine
