#include "engine/backends/tcp/part_planner.h"

#include <gtest/gtest.h>

#include <numeric>

namespace pdkv::engine::tcp {
namespace {

uint64_t sum_bytes(const PartPlan& p) {
  uint64_t s = 0;
  for (const auto& part : p.parts) s += part.bytes;
  return s;
}

// plan_parts() into a fresh plan.
PartPlan planned(std::span<const WriteBlock> blocks, const PlanLimits& limits,
                 uint32_t first_stream = 0) {
  PartPlan plan;
  plan_parts(blocks, limits, first_stream, &plan);
  return plan;
}

TEST(PartPlanner, MergesBlocksContinuingInSourceAndDestination) {
  std::vector<WriteBlock> blocks = {
      {100, 1000, 10}, {110, 1010, 5}, {115, 2000, 5}, {120, 2005, 0}, {120, 2005, 1}};
  const PartPlan plan = planned(blocks, PlanLimits{1, 1 << 20, 100});
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[0].length, 15u);
  EXPECT_EQ(plan.entries[1].length, 6u);
  EXPECT_EQ(plan.entries[1].block_index, 2u);
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_EQ(plan.parts[0].bytes, 21u);
  // Entry 1 merged blocks 2-4 (3 is empty), entry 0 blocks 0-1: a bad address names the
  // range merged into its piece.
  BlockName b = name_block(plan.entries[1], 2005);
  EXPECT_EQ(b.first, 2u);
  EXPECT_EQ(b.last, 4u);
  EXPECT_EQ(b.dst, 2000u);
  EXPECT_EQ(b.length, 6u);
  b = name_block(plan.entries[0], 1012);
  EXPECT_EQ(b.first, 0u);
  EXPECT_EQ(b.last, 1u);
}

TEST(PartPlanner, BlocksOfDifferentGrantsNeverShareAnEntry) {
  // Contiguous in both source and destination, and equally spaced: one entry if the grants
  // were equal; a batch mixing rooms keeps each room's grant on its own entries.
  std::vector<WriteBlock> blocks = {
      {100, 1000, 10, 7}, {110, 1010, 10, 8}, {200, 2000, 10, 8}, {300, 3000, 10, 9}};
  const PartPlan plan = planned(blocks, PlanLimits{1, 1 << 20, 100});
  ASSERT_EQ(plan.entries.size(), 3u);
  EXPECT_EQ(plan.entries[0].grant, 7u);
  EXPECT_EQ(plan.entries[1].grant, 8u);
  EXPECT_EQ(plan.entries[1].pieces, 2u);  // the two grant-8 blocks fold into a run
  EXPECT_EQ(plan.entries[2].grant, 9u);
}

TEST(PartPlanner, SmallBatchUsesOneRotatingStream) {
  std::vector<WriteBlock> blocks = {{0, 0, 1000}};
  const PartPlan plan = planned(blocks, PlanLimits{4, 1 << 20, 100}, 3);
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_EQ(plan.parts[0].stream, 3u);
}

TEST(PartPlanner, OneHugeBlockIsSplitEvenlyOverStreams) {
  const uint64_t len = (uint64_t{1} << 30) + 3;
  std::vector<WriteBlock> blocks = {{1 << 20, 1 << 24, len}};
  const PartPlan plan = planned(blocks, PlanLimits{4, 1 << 20, 100}, 1);
  ASSERT_EQ(plan.parts.size(), 4u);
  EXPECT_EQ(sum_bytes(plan), len);
  for (const auto& p : plan.parts) {
    EXPECT_LE(p.bytes, len / 4 + 1);
    EXPECT_GE(p.bytes, len / 4 - 3);
  }
  // Pieces continue each other in src and dst.
  for (size_t i = 1; i < plan.entries.size(); ++i) {
    EXPECT_EQ(plan.entries[i].src_addr, plan.entries[i - 1].src_addr + plan.entries[i - 1].length);
  }
  std::vector<uint32_t> streams;
  for (const auto& p : plan.parts) streams.push_back(p.stream);
  EXPECT_EQ(streams, (std::vector<uint32_t>{1, 2, 3, 0}));
}

TEST(PartPlanner, EntryLimitSplitsParts) {
  std::vector<WriteBlock> blocks;
  for (uint64_t i = 0; i < 10; ++i) blocks.push_back({i * 100, 10000 - i * 100, 50});
  const PartPlan plan = planned(blocks, PlanLimits{1, 1 << 20, 3});
  ASSERT_EQ(plan.parts.size(), 4u);
  EXPECT_EQ(plan.parts[3].entry_count, 1u);
  EXPECT_EQ(sum_bytes(plan), 500u);
}

// A head-split KV page: 16 tokens of 512 bytes, contiguous in source, every other 512
// bytes in destination. Two pages whose destinations are not equally spaced make two runs.
TEST(PartPlanner, FoldsEquallySpacedBlocksIntoRuns) {
  std::vector<WriteBlock> blocks;
  for (uint64_t t = 0; t < 16; ++t) blocks.push_back({1000 + t * 512, 100000 + t * 1024, 512});
  for (uint64_t t = 0; t < 16; ++t) blocks.push_back({9192 + t * 512, 500000 + t * 1024, 512});
  blocks.push_back({20000, 900000, 100});
  const PartPlan plan = planned(blocks, PlanLimits{1, 1 << 20, 100});
  ASSERT_EQ(plan.entries.size(), 3u);
  EXPECT_EQ(plan.entries[0].pieces, 16u);
  EXPECT_EQ(plan.entries[0].src_stride, 512u);
  EXPECT_EQ(plan.entries[0].dst_stride, 1024u);
  EXPECT_EQ(plan.entries[1].pieces, 16u);
  EXPECT_EQ(plan.entries[1].block_index, 16u);
  EXPECT_EQ(plan.entries[2].pieces, 1u);
  EXPECT_EQ(plan.entries[2].dst_stride, 0u);
  EXPECT_EQ(sum_bytes(plan), 32u * 512 + 100);
  const BlockName b = name_block(plan.entries[1], 500000 + 3 * 1024 + 7);
  EXPECT_EQ(b.first, 19u);
  EXPECT_EQ(b.last, 19u);
  EXPECT_EQ(b.dst, 500000u + 3 * 1024);
  EXPECT_EQ(b.length, 512u);
}

// A run with an empty block in the middle of it is no longer one block per piece: a bad
// address names the whole range of blocks it carries.
TEST(PartPlanner, ARunWithAnEmptyBlockInsideNamesItsWholeRange) {
  std::vector<WriteBlock> gap = {{0, 0, 512}, {512, 1024, 512}, {1024, 1024, 0}, {1024, 2048, 512}};
  const PartPlan plan = planned(gap, PlanLimits{1, 1 << 20, 100});
  ASSERT_EQ(plan.entries.size(), 1u);
  EXPECT_EQ(plan.entries[0].pieces, 3u);
  const BlockName b = name_block(plan.entries[0], 2048 + 3);
  EXPECT_EQ(b.first, 0u);
  EXPECT_EQ(b.last, 3u);
  EXPECT_EQ(b.dst, 2048u);
}

TEST(PartPlanner, OverlappingOrDescendingBlocksStayApart) {
  std::vector<WriteBlock> blocks = {{0, 1000, 64}, {32, 2000, 64}, {200, 900, 64}};
  const PartPlan plan = planned(blocks, PlanLimits{1, 1 << 20, 100});
  EXPECT_EQ(plan.entries.size(), 3u);
}

TEST(PartPlanner, RunsAreSplitAtPieceBoundariesAcrossStreams) {
  std::vector<WriteBlock> blocks;
  for (uint64_t i = 0; i < 1000; ++i) blocks.push_back({i * 4096, i * 8192, 4096});
  const PartPlan plan = planned(blocks, PlanLimits{4, 1 << 18, 100});
  ASSERT_EQ(plan.parts.size(), 4u);
  EXPECT_EQ(sum_bytes(plan), 1000u * 4096);
  uint64_t pieces = 0;
  for (const auto& e : plan.entries) {
    pieces += e.pieces;
    EXPECT_EQ(e.bytes() % 4096, 0u);
    EXPECT_EQ(e.dst_addr % 8192, 0u);
    if (e.pieces == 1) {
      EXPECT_EQ(e.dst_stride, 0u);
    }
  }
  EXPECT_EQ(pieces, 1000u);
  for (const auto& p : plan.parts) EXPECT_GE(p.bytes, 4096u * 240);
  // Cut runs still name single blocks exactly.
  for (const PartEntry& e : plan.entries) {
    const uint64_t last_piece = e.dst_addr + (e.pieces - 1) * e.dst_stride;
    const BlockName b = name_block(e, last_piece + 5);
    EXPECT_EQ(b.first, b.last);
    EXPECT_EQ(b.first, last_piece / 8192);
    EXPECT_EQ(b.dst, last_piece);
  }
}

TEST(PartPlanner, EmptyAndZeroLengthOnly) {
  std::vector<WriteBlock> blocks = {{1, 2, 0}};
  const PartPlan plan = planned(blocks, PlanLimits{4, 1, 3});
  EXPECT_TRUE(plan.parts.empty());
}

// Parts read from device memory are staged whole in one slab: no part carries more than
// max_part_bytes, whatever the shape (a big block, a run of small pieces, a run whose
// pieces are each above the bound), and the bytes and block names survive the cuts.
TEST(PartPlanner, ByteBoundCutsEveryShape) {
  std::vector<WriteBlock> blocks;
  blocks.push_back({1u << 30, 2u << 30, 1000});  // one big block
  for (uint64_t i = 0; i < 64; ++i) {            // a run of 64 x 40 B
    blocks.push_back({(3u << 30) + i * 80, (4u << 30) + i * 100, 40});
  }
  for (uint64_t i = 0; i < 3; ++i) {  // a run of 3 x 700 B
    blocks.push_back({(5u << 30) + i * 1000, (6u << 30) + i * 2000, 700});
  }
  PlanLimits limits{2, 1 << 20, 1 << 20};
  limits.max_part_bytes = 256;
  const PartPlan plan = planned(blocks, limits);
  uint64_t total = 0;
  for (const PlannedPart& part : plan.parts) {
    EXPECT_LE(part.bytes, 256u);
    EXPECT_GT(part.entry_count, 0u);
    uint64_t bytes = 0;
    for (uint32_t k = 0; k < part.entry_count; ++k) {
      bytes += plan.entries[part.first_entry + k].bytes();
    }
    EXPECT_EQ(bytes, part.bytes);
    total += bytes;
  }
  EXPECT_EQ(total, 1000u + 64 * 40 + 3 * 700);
  // A 700 B piece of the last run is cut by length, each cut naming its own block.
  const PartEntry& last = plan.entries.back();
  EXPECT_EQ(last.pieces, 1u);
  EXPECT_EQ(name_block(last, last.dst_addr).first, 1u + 64 + 2);
}

TEST(PartPlanner, NoByteBoundKeepsPartsWhole) {
  std::vector<WriteBlock> blocks = {{1u << 30, 2u << 30, 5000}};
  const PartPlan plan = planned(blocks, PlanLimits{1, 1 << 20, 1 << 20});
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_EQ(plan.parts[0].bytes, 5000u);
}

}  // namespace
}  // namespace pdkv::engine::tcp
