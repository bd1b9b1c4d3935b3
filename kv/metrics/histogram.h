// Histogram: a Prometheus histogram with fixed bucket bounds, cheap enough for the data
// path: observe() is a scan of at most kMaxBuckets bounds and two relaxed atomic adds (no
// lock, no allocation). Values are unsigned integers in a raw unit (nanoseconds, bytes,
// blocks); the exposition divides by `raw_per_unit` to print base units (seconds).
//
// Thread safety: observe() and snapshot() may run concurrently from any thread. A
// snapshot is not one instant, but every bucket only grows, and its count is the sum of
// its buckets (so the exposition's +Inf bucket always equals _count).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

namespace pdkv::kv {

class Histogram {
 public:
  static constexpr size_t kMaxBuckets = 24;

  struct Snapshot {
    std::span<const uint64_t> bounds;  // raw upper bounds, ascending
    double raw_per_unit = 1;
    std::array<uint64_t, kMaxBuckets + 1> counts{};  // per bucket (not cumulative); last = +Inf
    uint64_t count = 0;
    uint64_t sum = 0;  // raw units
  };

  // `bounds` (ascending, at most kMaxBuckets) must outlive the histogram: pass a static
  // constexpr array.
  Histogram(std::span<const uint64_t> bounds, double raw_per_unit)
      : bounds_(bounds), raw_per_unit_(raw_per_unit) {}
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void observe(uint64_t raw) {
    size_t i = 0;
    while (i < bounds_.size() && raw > bounds_[i]) ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(raw, std::memory_order_relaxed);
  }

  Snapshot snapshot() const {
    Snapshot s;
    s.bounds = bounds_;
    s.raw_per_unit = raw_per_unit_;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      s.counts[i] = counts_[i].load(std::memory_order_relaxed);
      s.count += s.counts[i];
    }
    s.sum = sum_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  const std::span<const uint64_t> bounds_;
  const double raw_per_unit_;
  std::array<std::atomic<uint64_t>, kMaxBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_{0};
};

}  // namespace pdkv::kv
