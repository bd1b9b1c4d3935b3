#include "kv/route/instance_breaker.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;

TEST(InstanceBreakers, OpensAfterConsecutiveFailuresAndProbesAfterTheBackOff) {
  InstanceBreakers b(BreakerPolicy{3, milliseconds(1000)});
  const TimePoint t0 = now();
  EXPECT_FALSE(b.failed("dead:1", "no answer", t0));
  EXPECT_FALSE(b.failed("dead:1", "no answer", t0));
  EXPECT_FALSE(b.refusal("dead:1", t0).has_value());
  EXPECT_TRUE(b.failed("dead:1", "connection refused", t0));
  auto refused = b.refusal("dead:1", t0 + milliseconds(10));
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(refused->find("connection refused"), std::string::npos) << *refused;
  EXPECT_NE(refused->find("dead:1"), std::string::npos) << *refused;
  EXPECT_FALSE(b.refusal("alive:1", t0).has_value());  // per address
  // The back-off passed: one probe may go; its failure opens the breaker again.
  EXPECT_FALSE(b.refusal("dead:1", t0 + milliseconds(1000)).has_value());
  EXPECT_TRUE(b.failed("dead:1", "still dead", t0 + milliseconds(1000)));
  EXPECT_TRUE(b.refusal("dead:1", t0 + milliseconds(1500)).has_value());
  // A success closes it.
  b.succeeded("dead:1");
  EXPECT_FALSE(b.refusal("dead:1", t0 + milliseconds(1500)).has_value());
  EXPECT_EQ(b.tracked(), 0u);
}

TEST(InstanceBreakers, RemembersABoundedNumberOfAddresses) {
  InstanceBreakers b(BreakerPolicy{1, milliseconds(1000)});
  const TimePoint t0 = now();
  for (size_t i = 0; i < InstanceBreakers::kMaxTrackedInstances + 10; ++i)
    b.failed("host" + std::to_string(i) + ":1", "x", t0 + milliseconds(i));
  EXPECT_EQ(b.tracked(), InstanceBreakers::kMaxTrackedInstances);
  EXPECT_FALSE(b.refusal("host0:1", t0).has_value());  // the oldest was forgotten
  EXPECT_TRUE(b.refusal("host" + std::to_string(InstanceBreakers::kMaxTrackedInstances + 9) + ":1",
                        t0 + milliseconds(InstanceBreakers::kMaxTrackedInstances + 9))
                  .has_value());
}

}  // namespace
}  // namespace pdkv::kv
