#include "engine/conformance/conformance_data.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <random>
#include <utility>

#include "engine/conformance/backend_harness.h"

namespace pdkv::engine::testing {

std::vector<std::string> backends_under_test() {
  std::vector<std::string> v{"shm"};
#ifdef PDKV_HAVE_UCX
  v.push_back("ucx:tcp");
  v.push_back("ucx:posix,sysv,cma,self");
#endif
  return v;
}

std::string backend_of(const std::string& param) { return param.substr(0, param.find(':')); }

void apply_transports(const std::string& param) {
  auto colon = param.find(':');
  if (colon != std::string::npos) setenv("PDKV_UCX_TLS", param.substr(colon + 1).c_str(), 1);
}

std::string param_name(const std::string& param) {
  std::string n = param;
  for (auto& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

std::vector<WriteBlock> random_blocks(uint64_t seed, const std::vector<uint8_t>& src,
                                      uint64_t dst_base, std::vector<uint8_t>* model) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<uint64_t, uint64_t>> slots;  // offset, length
  for (uint64_t off = 0; off < model->size();) {
    uint64_t len = 1 + rng() % ((rng() % 8 == 0) ? (4u << 20) : (64u << 10));
    len = std::min<uint64_t>(len, model->size() - off);
    slots.emplace_back(off, len);
    off += len;
  }
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<WriteBlock> blocks;
  blocks.reserve(slots.size());
  uint64_t src_off = 0;
  for (auto [off, len] : slots) {
    if (rng() % 10 == 0 || src_off + len > src.size()) continue;  // leave some holes
    blocks.push_back({reinterpret_cast<uint64_t>(src.data()) + src_off, dst_base + off, len});
    std::copy_n(src.data() + src_off, len, model->data() + off);
    src_off += len;
  }
  return blocks;
}

std::vector<uint8_t> random_bytes(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;  // xorshift64: fast enough for 1 GiB
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + i, &x, 8);
  }
  return v;
}

void expect_region(BackendPeerProcess& p, const std::vector<uint8_t>& model) {
  uint64_t h = 0;
  bool canaries = false;
  ASSERT_TRUE(p.hash(&h, &canaries));
  EXPECT_TRUE(canaries) << "bytes written outside the registered region";
  EXPECT_EQ(h, fnv64(model.data(), model.size())) << "destination bytes differ";
}

}  // namespace pdkv::engine::testing
