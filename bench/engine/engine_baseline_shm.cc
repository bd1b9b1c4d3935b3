#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "bench/engine/engine_baselines.h"

namespace pdkv::bench {

Result<double> memcpy_baseline_gbps(uint64_t block_bytes, uint64_t total_bytes, int runs) {
  if (block_bytes == 0 || total_bytes < block_bytes) return invalid_argument("bad baseline sizes");
  const uint64_t n = total_bytes / block_bytes;
  const uint64_t bytes = n * block_bytes;
  auto* src = static_cast<uint8_t*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* dst = static_cast<uint8_t*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (src == MAP_FAILED || dst == MAP_FAILED) return unavailable("baseline: mmap failed");
  // Pre-fault both sides: the baseline is the copy, not the page faults.
  std::memset(src, 0x5a, bytes);
  std::memset(dst, 0, bytes);
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  std::vector<double> gbps;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < n; ++i) {
      std::memcpy(dst + order[i] * block_bytes, src + i * block_bytes, block_bytes);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  bool intact = dst[order[0] * block_bytes] == 0x5a;
  munmap(src, bytes);
  munmap(dst, bytes);
  if (!intact) return internal_error("baseline copy did not land");
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

}  // namespace pdkv::bench
