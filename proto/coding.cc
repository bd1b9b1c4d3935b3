#include "proto/coding.h"

#include <fmt/format.h>

namespace pdkv::proto {

bool WireReader::need(std::string_view field, size_t n) {
  if (!status_.ok()) return false;
  if (rest_.size() < n) {
    fail(field, fmt::format("needs {} bytes, {} left", n, rest_.size()));
    return false;
  }
  return true;
}

bool WireReader::check_count(std::string_view field, uint64_t count, size_t elem_bytes,
                             size_t max_count) {
  if (count > max_count) {
    fail(field, fmt::format("count {} exceeds the limit {}", count, max_count));
    return false;
  }
  // count <= 2^32 and elem_bytes is small, but divide anyway so no product can wrap.
  if (elem_bytes != 0 && count > rest_.size() / elem_bytes) {
    fail(field, fmt::format("count {} x {} bytes exceeds the {} bytes left", count, elem_bytes,
                            rest_.size()));
    return false;
  }
  return true;
}

bool WireReader::boolean(std::string_view field) {
  uint8_t v = u8(field);
  if (v > 1) fail(field, fmt::format("bool byte is {}, not 0 or 1", v));
  return v == 1;
}

std::string WireReader::bytes(std::string_view field, size_t max_bytes) {
  uint32_t len = u32(field);
  if (!status_.ok() || !check_count(field, len, 1, max_bytes)) return {};
  std::string out(rest_.substr(0, len));
  rest_.remove_prefix(len);
  return out;
}

std::vector<bool> WireReader::bool_array(std::string_view field, size_t max_count) {
  std::vector<bool> out;
  uint32_t n = u32(field);
  if (!status_.ok() || !check_count(field, n, 1, max_count)) return out;
  out.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    auto b = static_cast<unsigned char>(rest_[i]);
    if (b > 1) {
      fail(field, fmt::format("element {} is {}, not 0 or 1", i, b));
      return {};
    }
    out[i] = b == 1;
  }
  rest_.remove_prefix(n);
  return out;
}

uint32_t WireReader::count(std::string_view field, size_t record_bytes, size_t max_count) {
  uint32_t n = u32(field);
  if (!status_.ok() || !check_count(field, n, record_bytes, max_count)) return 0;
  return n;
}

void WireReader::fail(std::string_view field, std::string_view why) {
  if (!status_.ok()) return;
  status_ = data_loss(fmt::format("{}: field '{}': {}", context_, field, why));
}

Status WireReader::finish() {
  if (status_.ok() && !rest_.empty()) {
    status_ = data_loss(
        fmt::format("{}: {} trailing bytes after the last field", context_, rest_.size()));
  }
  return status_;
}

}  // namespace pdkv::proto
