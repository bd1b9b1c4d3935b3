#include "kv/destination_shard.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pdkv::kv {
namespace {

TEST(DestinationShardTest, OrderAndDuplicatesDoNotMatter) {
  EXPECT_EQ(destination_shard({"a:1", "b:2"}, 8), destination_shard({"b:2", "a:1", "a:1"}, 8));
}

TEST(DestinationShardTest, IPv6IdsAreFine) {
  EXPECT_LT(destination_shard({"[fe80::1]:7000"}, 4), 4u);
}

TEST(DestinationShardTest, NeighbouringPortsSpreadOverQueues) {
  // The reference's port-sum modulo put {p, p+3} and {p+1, p+2} on the same queue; a
  // hash spreads 64 neighbouring endpoints over all 4 queues, none with more than half.
  std::vector<int> per_shard(4, 0);
  for (int port = 7000; port < 7064; ++port) {
    ++per_shard[destination_shard({"10.0.0.1:" + std::to_string(port)}, 4)];
  }
  for (int count : per_shard) {
    EXPECT_GT(count, 0);
    EXPECT_LT(count, 32);
  }
}

}  // namespace
}  // namespace pdkv::kv
