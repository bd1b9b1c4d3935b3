#include "proto/test_messages.h"

#include <random>
#include <string>

namespace pdkv::proto::testing {

RankIdentity sample_identity(Role role, uint32_t rank) {
  RankIdentity id;
  id.role = role;
  id.engine_rank = rank;
  id.attn_tp_rank = rank % 4;
  id.attn_tp_size = 4;
  id.dp_rank = (rank / 4) % 2;
  id.dp_size = 2;
  id.incarnation = 0x1122334455667788ull + rank;
  id.control_endpoint = "tcp://127.0.0.1:" + std::to_string(40000 + rank);
  id.engine_endpoint = "127.0.0.1:" + std::to_string(50000 + rank);
  return id;
}

namespace {

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  uint64_t u64() { return rng_(); }
  uint32_t u32() { return static_cast<uint32_t>(rng_()); }
  uint32_t below(uint32_t n) { return n == 0 ? 0 : u32() % n; }
  bool coin() { return (rng_() & 1) != 0; }
  std::string text(size_t max) {
    std::string s(below(static_cast<uint32_t>(max + 1)), 'x');
    for (char& c : s) c = static_cast<char>(u32() & 0xff);  // any bytes, not only text
    return s;
  }
  template <typename T>
  std::vector<T> vec(size_t max, T lo, T hi) {
    std::vector<T> v(below(static_cast<uint32_t>(max + 1)));
    // Span computed in 64 bits so INT32_MIN..INT32_MAX does not overflow.
    uint64_t span = static_cast<uint64_t>(int64_t{hi} - int64_t{lo}) + 1;
    for (auto&& x : v) x = static_cast<T>(int64_t{lo} + static_cast<int64_t>(u64() % span));
    return v;
  }

 private:
  std::mt19937_64 rng_;
};

RankIdentity random_identity(Gen& g) {
  RankIdentity id;
  id.role = g.coin() ? Role::kPrefill : Role::kDecode;
  id.attn_tp_size = 1 + g.below(64);
  id.attn_tp_rank = g.below(id.attn_tp_size);
  id.dp_size = 1 + g.below(8);
  id.dp_rank = g.below(id.dp_size);
  id.engine_rank = g.u32();
  id.incarnation = g.u64();
  id.control_endpoint = g.text(kMaxEndpointBytes);
  id.engine_endpoint = g.text(kMaxEndpointBytes);
  return id;
}

BufferSet random_buffers(Gen& g, size_t n) {
  BufferSet s;
  for (size_t i = 0; i < n; ++i) {
    s.ptrs.push_back(g.u64() >> 2);
    s.lens.push_back(g.u64() >> 3);
    s.item_lens.push_back(s.lens.back() >> g.below(20));
  }
  return s;
}

std::vector<Fragment> random_fragments(Gen& g) {
  std::vector<Fragment> out(g.below(5));
  for (Fragment& f : out) {
    f.buffer_kind = static_cast<BufferKind>(g.below(kMaxBufferKind + 1));
    f.buffer_index = g.u32();
    f.src_rank = g.u32();
    f.dst_rank = g.u32();
    f.src_page_stride_bytes = g.u64();
    f.dst_page_stride_bytes = g.u64();
    f.src_byte_offset = g.u64();
    f.dst_byte_offset = g.u64();
    f.bytes_per_page = 1 + (g.u64() >> 1);
    if (g.coin()) f.page_count = g.u64();
  }
  return out;
}

BufferRegistration random_registration(Gen& g) {
  BufferRegistration m;
  m.decode = random_identity(g);
  size_t nkv = g.below(9);
  m.kv = random_buffers(g, nkv);
  m.aux = random_buffers(g, g.below(3));
  m.state = random_buffers(g, g.below(4));
  m.layout.page_size = 1 + g.below(64);
  m.layout.total_kv_head_num = 1 + g.below(64);
  m.layout.kv_head_num = 1 + g.below(m.layout.total_kv_head_num);
  m.layout.head_dim = g.u32();
  m.layout.dtype_bytes = g.u32();
  m.layout.page_layout = g.coin() ? PageLayout::kHND : PageLayout::kNHD;
  m.layout.is_mla = g.coin();
  if (nkv > 0) {
    size_t layers = g.below(6);
    for (size_t i = 0; i < layers; ++i) {
      m.layout.layer_buffers.push_back(g.vec<uint32_t>(2, 0, static_cast<uint32_t>(nkv - 1)));
    }
    if (g.coin()) m.layout.kv_layer_ids.assign(layers, static_cast<int32_t>(g.below(100)));
    if (g.coin()) {
      for (size_t i = 0; i < layers; ++i) {
        m.layout.kv_layer_groups.push_back(static_cast<int32_t>(g.below(4)) - 1);
      }
    }
    if (g.coin()) m.kv_page_strides.assign(nkv, 0);
  }
  if (g.coin()) {
    for (size_t i = 0; i < m.state.ptrs.size(); ++i) {
      m.layout.state_buffer_groups.push_back(static_cast<int32_t>(g.below(3)));
    }
  }
  if (g.coin()) m.state_layer_ids.assign(m.state.ptrs.size(), static_cast<int32_t>(g.u32()));
  if (g.coin()) m.state_page_strides.assign(m.state.ptrs.size(), 0);
  m.enable_mla_l1_5_cache = g.coin();
  m.decode_prefix_len = g.u64();
  m.memory_descriptor = g.text(64);
  m.fragments = random_fragments(g);
  return m;
}

PreAllocation random_pre_allocation(Gen& g) {
  PreAllocation m;
  m.room = g.u64();
  m.decode = random_identity(g);
  m.kind = static_cast<PreAllocKind>(g.below(kMaxPreAllocKind + 1));
  m.required_dst_info_num = 1 + g.below(16);
  m.decode_prefix_len = g.u64();
  m.write_grant = g.u64();
  m.ticket = g.u64();
  m.registration_challenge = g.u64();
  if (g.coin()) m.aux_index = static_cast<int64_t>(g.u64() >> 1);
  if (g.coin()) {
    PageOwnership o;
    o.indices_are_local = g.coin();
    o.page_transfer_mask = g.vec<bool>(40, false, true);
    for (bool b : o.page_transfer_mask) {
      if (b) o.page_local_indices.push_back(static_cast<int64_t>(g.u64() >> 1));
    }
    m.dst_l1_5 = std::move(o);
  }
  if (m.kind == PreAllocKind::kTransfer) {
    m.dst_kv_pages = g.vec<int64_t>(100, 0, INT64_MAX / 2);
    m.state_slots = g.vec<int64_t>(3, -1, 1000);
    m.copy_state_buffers = g.coin();
    if (g.coin()) {
      uint32_t end = 0;
      const size_t groups = g.below(4);
      for (size_t i = 0; i + 1 < groups; ++i) {
        end += g.below(static_cast<uint32_t>(m.state_slots.size()) - end + 1);
        m.state_slot_group_ends.push_back(end);
      }
      if (groups > 0)
        m.state_slot_group_ends.push_back(static_cast<uint32_t>(m.state_slots.size()));
    }
    m.fragments_from_registration = g.coin();
    if (!m.fragments_from_registration) m.fragments = random_fragments(g);
  }
  return m;
}

TransferStatus random_status(Gen& g) {
  TransferStatus m;
  m.room = g.u64();
  m.state = g.coin() ? TransferState::kSuccess : TransferState::kFailed;
  m.prefill_engine_rank = g.u32();
  m.prefill_attn_tp_rank = g.u32();
  m.bootstrap_token = g.coin() ? -1 : static_cast<int64_t>(g.u64() >> 1);
  m.spec_candidate_ids = g.vec<int32_t>(8, INT32_MIN, INT32_MAX);
  if (g.coin()) {
    m.checksum_crc32c = g.u32();
    for (int i = g.coin() ? 3 : 0; i > 0; --i) {
      m.checksum_ranges.push_back(g.u64() >> 16);
      m.checksum_ranges.push_back(g.u32());
    }
  }
  m.failure_reason = g.text(100);
  m.failure_cause = static_cast<uint8_t>(g.u32());
  m.failure_stage = static_cast<uint8_t>(g.u32());
  m.ticket = g.u64();
  return m;
}

}  // namespace

Message random_message(uint64_t seed) {
  Gen g(seed);
  switch (seed % std::variant_size_v<Message>) {
    case 0: return random_registration(g);
    case 1: return random_pre_allocation(g);
    case 2: return random_status(g);
    case 3:
      return Abort{g.u64(), random_identity(g), g.text(kMaxReasonBytes),
                   static_cast<uint8_t>(g.u32()), g.u64()};
    case 4: return RegistrationResult{random_identity(g), g.u64(), g.coin(), g.text(200), g.u64()};
    case 5: return Ping{random_identity(g), g.u64()};
    default: return Pong{random_identity(g), g.u64()};
  }
}

std::vector<Message> sample_messages(uint64_t seed) {
  BufferRegistration reg;
  reg.decode = sample_identity(Role::kDecode, 1);
  reg.layout = KvLayout{16, 2, 8, 128, 2,   PageLayout::kNHD, false, {{0, 2}, {1, 3}}, {0, 1},
                        0,  0, 0, 0,   {0}, {-1, 1}};
  reg.kv = BufferSet{
      {0x1000, 0x2000, 0x3000, 0x4000}, {4096, 4096, 4096, 4096}, {1024, 1024, 1024, 1024}};
  reg.aux = BufferSet{{0x9000}, {640}, {64}};
  reg.state = BufferSet{{0xa000}, {1 << 20}, {1 << 16}};
  reg.state_layer_ids = {3};
  reg.enable_mla_l1_5_cache = false;
  reg.decode_prefix_len = 0;
  reg.memory_descriptor = std::string("rkey\0blob", 9);
  reg.fragments = {Fragment{BufferKind::kTargetV, 1, 0, 1, 1024, 2048, 512, 0, 512, {}}};
  reg.kv_page_strides = {2048, 0, 0, 1024};
  reg.state_page_strides = {1 << 17};

  PreAllocation pre;
  pre.room = seed * 1000 + 7;
  pre.decode = reg.decode;
  pre.dst_kv_pages = {5, 6, 7, 100};
  pre.aux_index = 3;
  pre.state_slots = {2, -1, 4};
  pre.state_slot_group_ends = {1, 1, 3};  // three groups, the second one empty
  pre.copy_state_buffers = true;
  pre.required_dst_info_num = 2;
  pre.decode_prefix_len = 32;
  pre.dst_l1_5 = PageOwnership{true, {true, false, true, true}, {0, 1, 2}};
  pre.fragments = {Fragment{BufferKind::kTargetK, 0, 1, 0, 1024, 2048, 0, 1024, 1024, {}},
                   Fragment{BufferKind::kMambaState, 3, 1, 0, 4096, 4096, 0, 0, 4096, 1}};

  TransferStatus st;
  st.room = seed * 1000 + 7;
  st.state = TransferState::kSuccess;
  st.prefill_engine_rank = 5;
  st.prefill_attn_tp_rank = 1;
  st.bootstrap_token = 42;
  st.spec_candidate_ids = {7, 8, 9};
  st.checksum_crc32c = 0xdeadbeef;
  Abort ab{seed * 1000 + 7, sample_identity(Role::kPrefill, 5), "embedding never arrived", 8};
  RegistrationResult rr{sample_identity(Role::kPrefill, 5), reg.decode.incarnation, false,
                        "page_layout differs: prefill NHD, decode HND"};
  Ping ping{reg.decode, seed};
  Pong pong{sample_identity(Role::kPrefill, 5), seed};
  return {reg, pre, st, ab, rr, ping, pong};
}

std::vector<Message> minimal_messages() {
  PreAllocation dummy;
  dummy.kind = PreAllocKind::kDummy;
  return {BufferRegistration{}, PreAllocation{}, dummy, TransferStatus{}, Abort{},
          RegistrationResult{}, Ping{},          Pong{}};
}

}  // namespace pdkv::proto::testing
