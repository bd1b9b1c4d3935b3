// MemoryRegistry: the regions of this process that peers may write into.
//
// Every backend receiver validates each incoming write against it before touching
// memory (SPEC §12 item 6, TARGETS R6). Regions never overlap. check() accepts a range
// covered by registered memory; regions registered back to back count as one span,
// because senders merge blocks that continue each other and would otherwise be rejected
// when two such regions happen to be adjacent. No byte outside registered memory is ever
// accepted.
//
// Removal vs. in-flight writes: a receiver takes a WritePin before validating a part and
// drops it after the last byte landed. remove() unlinks the region at once (later checks
// fail) and then waits until every pin taken before that point is gone, so memory is
// never written after remove() returns.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace pdkv::engine {

struct Region {
  uint64_t addr = 0;
  uint64_t length = 0;
};

// One destination range as a receiver sees it.
struct DstRange {
  uint64_t addr = 0;
  uint64_t length = 0;
};

class MemoryRegistry {
 public:
  MemoryRegistry() = default;
  MemoryRegistry(const MemoryRegistry&) = delete;
  MemoryRegistry& operator=(const MemoryRegistry&) = delete;

  // InvalidArgument for length 0 or addr+length overflow; FailedPrecondition on overlap.
  Status add(uint64_t addr, uint64_t length);
  // NotFound if no region starts at addr. Blocks until earlier pins are released.
  Status remove(uint64_t addr, uint64_t* length_out = nullptr);

  // OK if [addr, addr+length) is covered by registered memory (length 0 is OK).
  // Otherwise OutOfRange; *first_bad (if given) is the first address not covered.
  Status check(uint64_t addr, uint64_t length, uint64_t* first_bad = nullptr) const;

  // Checks every range under one lock. Returns ranges.size() if all are covered, else the
  // index of the first bad one (with its first uncovered address in *first_bad).
  size_t check_all(std::span<const DstRange> ranges, uint64_t* first_bad) const;

  std::vector<Region> regions() const;

  // RAII: keeps remove() from returning while a validated write is in progress.
  class WritePin {
   public:
    WritePin(WritePin&& other) noexcept;
    WritePin& operator=(WritePin&&) = delete;
    WritePin(const WritePin&) = delete;
    ~WritePin();

   private:
    friend class MemoryRegistry;
    WritePin(const MemoryRegistry* registry, uint64_t epoch);
    const MemoryRegistry* registry_;
    uint64_t epoch_;
  };
  WritePin pin() const;

 private:
  // Caller holds mu_.
  bool covered(uint64_t addr, uint64_t length, uint64_t* first_bad) const PDKV_REQUIRES(mu_);
  void unpin(uint64_t epoch) const;

  mutable Mutex mu_;
  mutable CondVar pins_cv_;
  std::map<uint64_t, uint64_t> regions_ PDKV_GUARDED_BY(mu_);       // addr -> length
  uint64_t epoch_ PDKV_GUARDED_BY(mu_) = 1;                         // bumped by remove()
  mutable std::map<uint64_t, uint64_t> pins_ PDKV_GUARDED_BY(mu_);  // epoch -> live pins
};

}  // namespace pdkv::engine
