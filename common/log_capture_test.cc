#include "common/log_capture.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/logging.h"

namespace pdkv::log_capture {
namespace {

using std::chrono::milliseconds;

TEST(LogCapture, CapturedLinesCarryTheBareMessageAndLevel) {
  enable(16, false);
  PDKV_LOG_WARN("room {} failed: {}", 42, "test");
  auto lines = take(milliseconds(1000));
  disable();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].message, "room 42 failed: test");
  EXPECT_EQ(lines[0].level, static_cast<int>(spdlog::level::warn));
  EXPECT_GT(lines[0].unix_time, 1.6e9);
}

TEST(LogCapture, TakeWaitsForALineFromAnotherThread) {
  enable(16, false);
  std::thread t([] {
    std::this_thread::sleep_for(milliseconds(50));
    PDKV_LOG_WARN("late line");
  });
  auto lines = take(milliseconds(5000));
  t.join();
  disable();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].message, "late line");
}

TEST(LogCapture, FullQueueDropsAndCounts) {
  enable(2, false);
  const uint64_t before = dropped();
  for (int i = 0; i < 5; ++i) PDKV_LOG_WARN("line {}", i);
  auto lines = take(milliseconds(0));
  disable();
  EXPECT_EQ(lines.size(), 2u);
  EXPECT_EQ(dropped() - before, 3u);
}

TEST(LogCapture, NothingIsQueuedWhenDisabled) {
  disable();
  PDKV_LOG_WARN("to stderr only");
  enable(4, false);
  EXPECT_TRUE(take(milliseconds(0)).empty());
  disable();
}

}  // namespace
}  // namespace pdkv::log_capture
