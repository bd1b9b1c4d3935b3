// The P12 workloads' geometry: which blocks each group moves, that every block stays inside
// its own buffer on both sides, that no two destinations overlap, and that the plain
// comparison moves exactly the hybrid's byte count.
#include "bench/engine/engine_hybrid_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>

namespace pdkv::bench {
namespace {

HybridWorkload make(const std::string& model, uint64_t tokens, uint64_t page) {
  auto preset = find_hybrid_preset(model);
  EXPECT_TRUE(preset.ok());
  auto hw = make_hybrid_workload(*preset, tokens, page, 7);
  EXPECT_TRUE(hw.ok()) << hw.status().to_string();
  return *hw;
}

// Every block inside the layouts, no destination byte written twice, bytes summed right.
void expect_sound(const Workload& w) {
  std::vector<std::pair<uint64_t, uint64_t>> dst;
  uint64_t bytes = 0;
  for (const auto& b : w.blocks) {
    ASSERT_GT(b.length, 0u);
    ASSERT_LE(b.dst_addr + b.length, w.layout_bytes);
    ASSERT_LE(b.src_addr + b.length, w.layout_bytes);
    // Inside one registered destination region.
    const auto it = std::upper_bound(w.buffer_offsets.begin(), w.buffer_offsets.end(), b.dst_addr);
    ASSERT_NE(it, w.buffer_offsets.begin());
    const size_t region = static_cast<size_t>(it - w.buffer_offsets.begin()) - 1;
    ASSERT_LE(b.dst_addr + b.length, w.buffer_offsets[region] + w.buffer_lengths[region]);
    dst.emplace_back(b.dst_addr, b.dst_addr + b.length);
    bytes += b.length;
  }
  std::sort(dst.begin(), dst.end());
  for (size_t i = 1; i < dst.size(); ++i) ASSERT_LE(dst[i - 1].second, dst[i].first);
  EXPECT_EQ(bytes, w.payload_bytes);
}

TEST(HybridWorkload, SlidingWindowMovesTheLastWindowsPagesPlusOneWhenUnaligned) {
  // 200 tokens, page 16: 13 pages; the window starts at token 72, inside page 4.
  HybridWorkload hw = make("gpt-oss", 200, 16);
  ASSERT_EQ(hw.groups.size(), 2u);
  EXPECT_EQ(hw.groups[0].blocks, 36u * 13);
  EXPECT_EQ(hw.groups[1].blocks, 36u * 9);
  expect_sound(hw.workload);
  // Aligned start (4096 - 128 on a page boundary): exactly 128 / 16 pages; page 1: 128.
  EXPECT_EQ(make("gpt-oss", 4096, 16).groups[1].blocks, 36u * 8);
  EXPECT_EQ(make("gpt-oss", 4096, 1).groups[1].blocks, 36u * 128);
  EXPECT_EQ(make("gpt-oss", 4096, 64).groups[1].blocks, 36u * 2);
  // A prompt shorter than the window: every page.
  EXPECT_EQ(make("gpt-oss", 100, 16).groups[1].blocks, 36u * 7);
}

TEST(HybridWorkload, WindowPagesAreTheLastPagesOfTheirSource) {
  HybridWorkload hw = make("gpt-oss", 200, 16);
  const Workload& w = hw.workload;
  const size_t first_window_buffer = 36;
  for (size_t i = hw.group_first_block[1]; i < w.blocks.size(); ++i) {
    const uint64_t src = w.blocks[i].src_addr;
    const auto it = std::upper_bound(w.src_buffer_offsets.begin(), w.src_buffer_offsets.end(), src);
    const size_t buffer = static_cast<size_t>(it - w.src_buffer_offsets.begin()) - 1;
    ASSERT_GE(buffer, first_window_buffer);
    EXPECT_GE((src - w.src_buffer_offsets[buffer]) / w.blocks[i].length, 4u);
  }
}

TEST(HybridWorkload, StateSlotsMoveWholeToOneSharedSlotOfEachPool) {
  HybridWorkload hw = make("qwen3-next", 4096, 16);
  const Workload& w = hw.workload;
  ASSERT_EQ(hw.groups[1].name, "state");
  EXPECT_EQ(hw.groups[1].blocks, 36u);
  std::set<uint64_t> slots;
  for (size_t i = hw.group_first_block[1]; i < w.blocks.size(); ++i) {
    const size_t buffer = 24 + (i - hw.group_first_block[1]);
    EXPECT_EQ(w.blocks[i].length, 2u << 20);
    EXPECT_EQ(w.buffer_lengths[buffer], kStatePoolSlots * (2u << 20));
    slots.insert((w.blocks[i].dst_addr - w.buffer_offsets[buffer]) / (2u << 20));
  }
  EXPECT_EQ(slots.size(), 1u);  // one state index per request
  expect_sound(w);
}

TEST(HybridWorkload, IndexerPagesMoveWholePerPage) {
  HybridWorkload hw = make("deepseek-v32", 1024, 64);
  EXPECT_EQ(hw.groups[0].block_bytes, 64u * 1152);
  EXPECT_EQ(hw.groups[1].block_bytes, 64u * 132);
  EXPECT_EQ(hw.groups[1].blocks, 61u * 16);
  expect_sound(hw.workload);
}

TEST(PlainWorkload, MovesTheSameBytesInUniformPages) {
  for (const char* model : {"qwen3-next", "gpt-oss", "deepseek-v32"}) {
    for (uint64_t page : {1u, 16u, 64u}) {
      HybridWorkload hw = make(model, 1000, page);
      auto plain = make_plain_workload(hw.workload.payload_bytes, page, hw.workload.pages, 3);
      ASSERT_TRUE(plain.ok());
      EXPECT_EQ(plain->payload_bytes, hw.workload.payload_bytes) << model << " page " << page;
      // Whole pages but at most one (the remainder), wherever run-major order puts it.
      const auto short_pages =
          std::count_if(plain->blocks.begin(), plain->blocks.end(),
                        [&](const auto& b) { return b.length != page * kPlainBytesPerToken; });
      EXPECT_LE(short_pages, 1);
      expect_sound(*plain);
    }
  }
}

TEST(HybridWorkload, RejectsEmptyGeometry) {
  EXPECT_FALSE(find_hybrid_preset("llama3-8b").ok());
  auto preset = find_hybrid_preset("gpt-oss");
  ASSERT_TRUE(preset.ok());
  EXPECT_FALSE(make_hybrid_workload(*preset, 0, 16, 1).ok());
  EXPECT_FALSE(make_hybrid_workload(*preset, 16, 0, 1).ok());
  EXPECT_FALSE(make_plain_workload(0, 16, 4, 1).ok());
}

}  // namespace
}  // namespace pdkv::bench
