#include "kv/kv_args.h"

#include <gtest/gtest.h>

#include <limits>

#include "kv/route/stage_address.h"

namespace pdkv::kv {
namespace {

KvArgs two_layer_mha() {
  KvArgs a;
  a.tp_size = 2;
  a.engine_rank = 1;
  a.page_size = 16;
  a.kv_data_ptrs = {0x10000, 0x20000, 0x30000, 0x40000};
  a.kv_data_lens = {0x8000, 0x8000, 0x8000, 0x8000};
  a.kv_item_lens = {4096, 4096, 4096, 4096};
  a.layer_buffers = {{0, 2}, {1, 3}};
  a.kv_head_num = 4;
  a.total_kv_head_num = 8;
  a.head_dim = 32;
  a.dtype_bytes = 2;
  return a;
}

TEST(KvArgsTest, ValidArgsPass) { EXPECT_TRUE(two_layer_mha().validate().ok()); }

TEST(KvArgsTest, RankDerivations) {
  KvArgs a = two_layer_mha();
  a.dp_size = 2;
  a.engine_rank = 3;
  EXPECT_EQ(a.attn_tp_rank(), 1);
  EXPECT_EQ(a.dp_rank(), 1);
  EXPECT_EQ(a.layer_num(), 2);
  a.kv_layer_ids = {0, 5};
  a.state_data_ptrs = {0x90000};
  a.state_data_lens = {4096};
  a.state_item_lens = {1024};
  a.state_layer_ids = {7};
  EXPECT_EQ(a.layer_num(), 8);
}

TEST(KvArgsTest, EachInconsistencyIsNamed) {
  struct Case {
    const char* expect;
    void (*mutate)(KvArgs&);
  };
  const Case cases[] = {
      {"engine_rank", [](KvArgs& a) { a.engine_rank = 2; }},
      {"tp_size", [](KvArgs& a) { a.tp_size = 0; }},
      {"page_size", [](KvArgs& a) { a.page_size = 0; }},
      {"kv_data_ptrs", [](KvArgs& a) { a.kv_data_lens.pop_back(); }},
      {"overflows", [](KvArgs& a) { a.kv_data_ptrs[0] = std::numeric_limits<uint64_t>::max(); }},
      {"item length", [](KvArgs& a) { a.kv_item_lens[1] = 0x9000; }},
      {"kv_item_lens[2] is 0", [](KvArgs& a) { a.kv_item_lens[2] = 0; }},
      {"names buffer 9", [](KvArgs& a) { a.layer_buffers[1][0] = 9; }},
      {"kv_layer_ids", [](KvArgs& a) { a.kv_layer_ids = {0}; }},
      {"state_layer_ids", [](KvArgs& a) { a.state_layer_ids = {1}; }},
      {"exceeds total_kv_head_num", [](KvArgs& a) { a.kv_head_num = 16; }},
      {"MLA", [](KvArgs& a) { a.is_mla = true; }},
      {"kv_data_memory has 1 entries for 4",
       [](KvArgs& a) { a.kv_data_memory = {BufferMemory{}}; }},
      {"device must be >= -1",
       [](KvArgs& a) {
         a.kv_data_memory.assign(4, BufferMemory{engine::MemoryKind::kCuda, -2});
       }},
      {"gpu_id", [](KvArgs& a) { a.gpu_id = -3; }},
  };
  for (const Case& c : cases) {
    KvArgs a = two_layer_mha();
    c.mutate(a);
    Status s = a.validate();
    ASSERT_FALSE(s.ok()) << c.expect;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message();
  }
}

TEST(KvArgsTest, CompatibleLayoutsAcrossTpSizes) {
  KvArgs prefill = two_layer_mha();
  KvArgs decode = two_layer_mha();
  decode.tp_size = 4;
  decode.engine_rank = 0;
  decode.kv_head_num = 2;
  EXPECT_TRUE(check_layout_compatible(prefill, decode.layout()).ok());
}

TEST(KvArgsTest, LayoutMismatchesAreRejectedWithBothValues) {
  KvArgs prefill = two_layer_mha();
  KvArgs decode = two_layer_mha();
  decode.page_size = 32;
  Status s = check_layout_compatible(prefill, decode.layout());
  EXPECT_NE(s.message().find("page_size is 16 on prefill but 32 on decode"), std::string::npos);

  decode = two_layer_mha();
  decode.page_layout = proto::PageLayout::kHND;
  EXPECT_NE(check_layout_compatible(prefill, decode.layout()).message().find("NHD on prefill"),
            std::string::npos);

  decode = two_layer_mha();
  decode.layer_buffers = {{2, 0}, {1, 3}};
  EXPECT_NE(check_layout_compatible(prefill, decode.layout()).message().find("order differs"),
            std::string::npos);

  decode = two_layer_mha();
  decode.layer_buffers.pop_back();
  EXPECT_FALSE(check_layout_compatible(prefill, decode.layout()).ok());
}

TEST(KvArgsTest, StateGroupsCountCheckAndCompare) {
  KvArgs a = two_layer_mha();
  EXPECT_EQ(a.state_group_count(), 0);
  a.state_data_ptrs = {0x90000, 0xa0000};
  a.state_data_lens = {4096, 4096};
  a.state_item_lens = {1024, 1024};
  EXPECT_EQ(a.state_group_count(), 1);
  a.state_buffer_groups = {0, 2};
  a.kv_layer_groups = {-1, 1};
  EXPECT_EQ(a.state_group_count(), 3);
  EXPECT_TRUE(a.validate().ok());
  KvArgs bad = a;
  bad.state_buffer_groups = {0};
  EXPECT_NE(bad.validate().message().find("state_buffer_groups has 1 entries"), std::string::npos);
  bad = a;
  bad.kv_layer_groups = {-2, 0};
  EXPECT_NE(bad.validate().message().find("kv_layer_groups holds -2"), std::string::npos);
  // A buffer read by a chunked layer and by a group layer is fine: vLLM's hybrid
  // allocator lays one layer of each KV cache group over the same allocation.
  KvArgs shared = a;
  shared.layer_buffers = {{0, 2}, {1, 2}};
  EXPECT_TRUE(shared.validate().ok()) << shared.validate().message();
  bad = a;
  bad.kv_page_strides = {4096, 4095, 0, 0};
  EXPECT_NE(bad.validate().message().find("kv_page_strides[1]"), std::string::npos);

  // Equal groups pass; an empty vector equals its default spelled out; a difference names
  // both sides' values.
  KvArgs decode = a;
  EXPECT_TRUE(check_layout_compatible(a, decode.layout()).ok());
  KvArgs plain = two_layer_mha(), spelled = two_layer_mha();
  spelled.kv_layer_groups = {-1, -1};
  EXPECT_TRUE(check_layout_compatible(plain, spelled.layout()).ok());
  decode.kv_layer_groups = {1, -1};
  const Status s = check_layout_compatible(a, decode.layout());
  EXPECT_NE(s.message().find("kv_layer_groups is [-1, 1] on prefill but [1, -1] on decode"),
            std::string::npos)
      << s.to_string();
  decode = a;
  decode.state_buffer_groups = {};
  EXPECT_NE(check_layout_compatible(a, decode.layout())
                .message()
                .find("state_buffer_groups is "
                      "[0, 2] on prefill but [] "
                      "(default) on decode"),
            std::string::npos);
}

TEST(KvArgsTest, PipelineStagesAndTheirAddresses) {
  KvArgs a = two_layer_mha();
  a.pp_size = 3;
  a.pp_rank = 2;
  EXPECT_TRUE(a.validate().ok()) << a.validate().to_string();
  a.pp_rank = 3;
  EXPECT_NE(a.validate().message().find("pp_rank 3 is not a stage of pp_size 3"),
            std::string::npos);
  a.pp_size = 65;
  EXPECT_NE(a.validate().message().find("pp_size must be in [1, 64]"), std::string::npos);

  EXPECT_EQ(stage_address("10.0.0.1:8998", 0), "10.0.0.1:8998");
  EXPECT_EQ(stage_address("10.0.0.1:8998", 2), "10.0.0.1:8998#pp=2");
  auto split = split_stage_address("[::1]:8998#pp=2");
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->server, "[::1]:8998");
  EXPECT_EQ(split->pp_rank, 2);
  EXPECT_EQ(split_stage_address("h:1")->pp_rank, 0);
  for (const char* bad : {"h:1#pp=", "h:1#pp=64", "h:1#pp=-1", "h:1#x=1", "h:1#pp=1x"}) {
    EXPECT_FALSE(split_stage_address(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace pdkv::kv
