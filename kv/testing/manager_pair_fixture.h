// What the whole-pair KV manager tests (kv/manager_pair_*_test.cc) share: page lists in
// a random order, and KvManagerTest, managers of any TP size over one in-process bus with
// the steps of one head-sliced room. Fails tests through GoogleTest: test binaries only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kv/testing/room_pair.h"

namespace pdkv::kv::testing {

// `count` distinct pages of [0, capacity) in an order fixed by `seed`.
std::vector<int64_t> shuffled_pages(int64_t count, int64_t capacity, uint32_t seed);

// Managers of any TP size over one bus; the tests' buffers are declared after maker_, so
// the managers over them end before it.
class KvManagerTest : public ::testing::Test {
 protected:
  // One room from a TP 1 prefill to both ranks of a TP 2 decode, `src` sent in chunks of
  // at most `chunk_pages`: each decode rank must end with exactly its half of the heads.
  void move_head_sliced_room(uint64_t room, const std::vector<int64_t>& src,
                             const std::vector<int64_t>& dst0, const std::vector<int64_t>& dst1,
                             size_t chunk_pages, const KvManagerOptions& options = fast_options());

  ManagerMaker maker_;
  ModelShape shape_;
};

}  // namespace pdkv::kv::testing
