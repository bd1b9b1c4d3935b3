// GuardedBuffer: test/benchmark memory that two processes can see, fenced by guard pages.
//
// A memfd of `size` bytes (rounded up to whole pages) mapped MAP_SHARED between two
// PROT_NONE pages, so any write just outside it kills the writer with SIGSEGV. The
// creating process passes fd() to a child (it survives exec only where the child clears
// FD_CLOEXEC, as PeerProcess does); the child maps the same pages with map_fd() and the
// parent later reads exactly what the child's engine wrote.
//
// Thread safety: the object is not synchronised; the bytes are plain shared memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"

namespace pdkv::engine::testing {

class GuardedBuffer {
 public:
  static Result<std::unique_ptr<GuardedBuffer>> create(size_t size);
  // Maps an inherited memfd of `size` bytes (as passed on a command line).
  static Result<std::unique_ptr<GuardedBuffer>> map_fd(int fd, size_t size);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(data_); }

 private:
  GuardedBuffer(int fd, bool owns_fd, uint8_t* reservation, size_t reservation_bytes, size_t size);
  int fd_;
  bool owns_fd_;
  uint8_t* reservation_;
  size_t reservation_bytes_;
  uint8_t* data_;
  size_t size_;
};

// Fills with a position-dependent pattern (distinct per seed), quickly.
void fill_pattern(uint8_t* data, size_t size, uint64_t seed);
// Index of the first byte that differs from fill_pattern(.., seed) at `offset`, or size.
size_t first_pattern_mismatch(const uint8_t* data, size_t size, uint64_t seed, size_t offset = 0);

}  // namespace pdkv::engine::testing
