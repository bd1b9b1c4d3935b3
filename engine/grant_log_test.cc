// A write grant id is a capability: whoever knows a live one may write its room's pages.
// A refused write must therefore be logged (and reported to the sender, which logs it
// too) without the id. Two engines in this process over a real loopback TCP connection;
// the log captured with common/log_capture.h.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/log_capture.h"
#include "engine/grant_tag.h"
#include "engine/transfer_engine.h"

namespace pdkv::engine {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kLiveGrant = 0x7a3c5e9f1b2d4c68;
constexpr uint64_t kCompletedGrant = 0x6b1e9d4f2a8c3e57;

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

std::unique_ptr<TransferEngine> make_engine(bool require_grants) {
  EngineOptions o;
  o.tcp.streams = 1;
  o.require_write_grants = require_grants;
  auto e = TransferEngine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

// Every way the id could be spelled in a line: hex with or without 0x, either case, and
// decimal.
bool names(const std::string& text, uint64_t grant) {
  const std::string hex = fmt::format("{:x}", grant), upper = fmt::format("{:X}", grant);
  return text.find(hex) != std::string::npos || text.find(upper) != std::string::npos ||
         text.find(std::to_string(grant)) != std::string::npos;
}

class GrantLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The refusal warnings are rate-limited per call site: start in a fresh second.
    std::this_thread::sleep_for(milliseconds(1100));
    log_capture::enable(4096, /*keep_stderr=*/true);
    log_capture::take(milliseconds(0));
  }
  void TearDown() override { log_capture::disable(); }

  // Every line logged until a refusal line came (or 5 s passed).
  std::vector<std::string> lines_through_refusal() {
    std::vector<std::string> out;
    bool refusal = false;
    for (auto until = std::chrono::steady_clock::now() + seconds(5);
         !refusal && std::chrono::steady_clock::now() < until;) {
      for (auto& line : log_capture::take(milliseconds(100))) {
        refusal |= line.message.find("tcp receiver:") != std::string::npos;
        out.push_back(std::move(line.message));
      }
    }
    EXPECT_TRUE(refusal) << "no refusal was logged";
    return out;
  }
};

TEST_F(GrantLogTest, AWriteOutsideALiveGrantIsLoggedWithoutTheGrantId) {
  auto sender = make_engine(false);
  auto receiver = make_engine(true);
  std::vector<uint8_t> src(8192, 5), dst(16384, 0);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  ASSERT_TRUE(
      receiver->grant_writes(kLiveGrant, WriteGrant::of_range(addr(dst.data()), 4096)).ok());
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  // The second page is registered but outside the grant: refused.
  auto batch = sender->submit(
      *session,
      std::vector<WriteBlock>{{addr(src.data()), addr(dst.data()) + 4096, 4096, kLiveGrant}});
  ASSERT_TRUE(batch.ok());
  auto st = sender->wait(*batch, seconds(30));
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->state, BatchState::kFailed);
  EXPECT_EQ(st->error.code(), StatusCode::kOutOfRange) << st->error.to_string();
  EXPECT_FALSE(names(st->error.message(), kLiveGrant)) << st->error.message();
  bool tagged = false;  // the operator still sees which grant: by its tag
  for (const std::string& line : lines_through_refusal()) {
    EXPECT_FALSE(names(line, kLiveGrant)) << line;
    tagged |= line.find(grant_tag(kLiveGrant)) != std::string::npos;
  }
  EXPECT_TRUE(tagged);
  EXPECT_EQ(dst[4096], 0);
  (void)sender->release(*batch);
}

TEST_F(GrantLogTest, AWriteUnderACompletedGrantIsLoggedWithoutTheGrantId) {
  auto sender = make_engine(false);
  auto receiver = make_engine(true);
  std::vector<uint8_t> src(4096, 5), dst(4096, 0);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  ASSERT_TRUE(
      receiver->grant_writes(kCompletedGrant, WriteGrant::of_range(addr(dst.data()), 4096)).ok());
  ASSERT_TRUE(receiver->revoke_writes(kCompletedGrant, {}, GrantEnd::kCompleted).ok());
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  auto batch = sender->submit(*session, std::vector<WriteBlock>{{addr(src.data()), addr(dst.data()),
                                                                 4096, kCompletedGrant}});
  ASSERT_TRUE(batch.ok());
  auto st = sender->wait(*batch, seconds(30));
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->state, BatchState::kFailed);
  EXPECT_FALSE(names(st->error.message(), kCompletedGrant)) << st->error.message();
  for (const std::string& line : lines_through_refusal()) {
    EXPECT_FALSE(names(line, kCompletedGrant)) << line;
  }
  (void)sender->release(*batch);
}

}  // namespace
}  // namespace pdkv::engine
