// Test fixtures for the KV managers: buffers of a small model on each rank, filled with
// a pattern that names (layer buffer, page, head, token, byte) so that any misplaced
// byte is detected, and helpers to build prefill/decode managers over one in-process bus.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "kv/decode/decode_manager.h"
#include "kv/prefill/prefill_manager.h"
#include "kv/testing/in_process_channel.h"

namespace pdkv::kv::testing {

// Polls `pred` every 5 ms until it holds or `timeout` passes; returns its last value.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  const TimePoint deadline = now() + timeout;
  while (now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

struct ModelShape {
  int64_t layers = 2;
  int64_t total_kv_heads = 4;
  int64_t head_dim = 8;
  int64_t dtype_bytes = 2;
  int64_t page_size = 4;
  bool is_mla = false;
  proto::PageLayout layout = proto::PageLayout::kNHD;
};

// One rank's KV buffers (K of every layer, then V), num_pages pages each.
class RankBuffers {
 public:
  RankBuffers(const ModelShape& shape, int64_t tp_size, int64_t tp_rank, int64_t num_pages);
  KvArgs args(int64_t engine_rank, int64_t dp_size = 1) const;
  uint64_t item_bytes() const { return item_bytes_; }
  int64_t heads() const { return heads_; }
  int64_t first_head() const { return first_head_; }
  std::vector<std::vector<uint8_t>>& buffers() { return buffers_; }

  // Byte of model head `head`, token `token` of `page`, element byte `byte` in buffer b.
  uint8_t& at(size_t b, int64_t page, int64_t token, int64_t head, int64_t byte);
  // Fills every page with pattern_value(b, logical page, token, head, byte) where the
  // logical page is the request page stored at that physical page (pages[i] holds page i).
  void fill_request(const std::vector<int64_t>& pages, int64_t salt = 0);
  // True if the pages (request page i at pages[i]) hold what fill_request wrote, for the
  // heads this rank holds; `first` limits the check to request pages [first, pages.size()).
  // `salt` (e.g. the room) makes requests' patterns differ, so a page of one room landing
  // in another is caught.
  bool holds_request(const std::vector<int64_t>& pages, size_t first = 0, int64_t salt = 0);

  static uint8_t pattern_value(size_t b, int64_t page, int64_t token, int64_t head, int64_t byte,
                               int64_t salt = 0) {
    return static_cast<uint8_t>(b * 131 + page * 31 + token * 17 + head * 7 + byte * 3 + salt * 59 +
                                1);
  }

 private:
  ModelShape shape_;
  int64_t tp_size_, heads_, first_head_;
  uint64_t item_bytes_;
  std::vector<std::vector<uint8_t>> buffers_;
};

inline engine::EngineOptions loopback_engine() {
  engine::EngineOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.tcp.streams = 2;
  return o;
}

inline KvManagerOptions fast_options() {
  KvManagerOptions o;
  o.bootstrap_timeout = std::chrono::milliseconds(5000);
  o.waiting_timeout = std::chrono::milliseconds(10000);
  o.heartbeat_interval = std::chrono::milliseconds(100);
  o.heartbeat_max_failures = 3;
  return o;
}

// fast_options() with PDKV_VERIFY_CHECKSUM on.
inline KvManagerOptions checksum_options() {
  KvManagerOptions o = fast_options();
  o.verify_checksum = true;
  return o;
}

}  // namespace pdkv::kv::testing
