// StageBuffer: the grow-only, uninitialised byte buffer the TCP streams stage small
// entries in (TcpOptions::stage_max_bytes, and recv_stage_max_bytes on a receiver).
//
// Sized by what a run needs (doubling, so a stream that only ever moves small requests
// never holds the whole stage_buffer_bytes) and never zero-filled: a std::vector would
// memset, and so fault in, every page of a fresh buffer on the first request of each
// stream, which showed up as 30-45 ms latency outliers (BENCHMARKS.md, P5).
// Thread safety: none (one stream thread owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace pdkv::engine::tcp {

class StageBuffer {
 public:
  // A buffer of at least `bytes`; previous contents are not kept.
  uint8_t* reserve(size_t bytes) {
    if (bytes > capacity_) {
      size_t grown = capacity_ == 0 ? 64 * 1024 : capacity_;
      while (grown < bytes) grown *= 2;
      data_.reset(new uint8_t[grown]);  // default-initialised: no memset
      capacity_ = grown;
    }
    return data_.get();
  }
  uint8_t* data() { return data_.get(); }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
};

}  // namespace pdkv::engine::tcp
