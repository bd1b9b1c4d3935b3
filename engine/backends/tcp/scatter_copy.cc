#include "engine/backends/tcp/scatter_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PDKV_HAVE_STREAM_STORES 1
#endif

namespace pdkv::engine::tcp {
namespace {

// Below this, a piece fills at most a few lines and the partial-line tails dominate:
// memcpy (cached stores) is as fast and keeps the lines for whoever reads them next.
constexpr size_t kMinStreamBytes = 256;

}  // namespace

#ifdef PDKV_HAVE_STREAM_STORES
namespace {

// `n` bytes, a multiple of 64, from `s` to 16-byte-aligned `d` with streaming stores.
void stream_sse2(uint8_t* d, const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    for (size_t k = 0; k < 64; k += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + k));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + k), v);
    }
  }
}

// The same for 32-byte-aligned `d` with 32-byte stores: fewer stores per line, measured
// 1.3-1.4x the 16-byte form into a cold pool of 1 GiB.
__attribute__((target("avx2"))) void stream_avx2(uint8_t* d, const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
  }
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2");

}  // namespace
#endif

void scatter_copy(void* dst, const void* src, size_t n) {
#ifdef PDKV_HAVE_STREAM_STORES
  if (n >= kMinStreamBytes) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    const uintptr_t align = kHaveAvx2 ? 32 : 16;
    const size_t head = (align - (reinterpret_cast<uintptr_t>(d) & (align - 1))) & (align - 1);
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    const size_t body = n & ~size_t{63};
    if (kHaveAvx2) {
      stream_avx2(d, s, body);
    } else {
      stream_sse2(d, s, body);
    }
    std::memcpy(d + body, s + body, n - body);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void scatter_fence() {
#ifdef PDKV_HAVE_STREAM_STORES
  _mm_sfence();
#endif
}

}  // namespace pdkv::engine::tcp
