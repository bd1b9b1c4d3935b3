// Little-endian fixed-width encoding for control-plane message bodies.
//
// Encoding: every integer is fixed width, little-endian, two's complement for signed
// types; a bool is one byte 0 or 1; a byte string or an array is a u32 element count
// followed by its elements (bytes, or fixed-width integers). Nothing is ever copied from
// a struct onto the wire, so padding and host byte order are never part of the protocol.
//
// put_* append to a std::string. WireReader consumes from a string_view and checks the
// bytes present before every read; the encode_*/decode_* pairs are unchecked and say so.
//
// Thread safety: free functions are pure; a WireReader is owned by one thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pdkv::proto {

// Unchecked: REQUIRES dst has room for sizeof(T) bytes.
template <typename T>
inline void encode_fixed(char* dst, T value) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  U v = static_cast<U>(value);
  for (size_t i = 0; i < sizeof(T); ++i) dst[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Unchecked: REQUIRES src holds sizeof(T) bytes.
template <typename T>
inline T decode_fixed(const char* src) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  U v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<U>(static_cast<unsigned char>(src[i])) << (8 * i);
  }
  return static_cast<T>(v);
}

template <typename T>
inline void put_fixed(std::string* dst, T value) {
  char buf[sizeof(T)];
  encode_fixed<T>(buf, value);
  dst->append(buf, sizeof(T));
}

inline void put_u8(std::string* dst, uint8_t v) { put_fixed<uint8_t>(dst, v); }
inline void put_u16(std::string* dst, uint16_t v) { put_fixed<uint16_t>(dst, v); }
inline void put_u32(std::string* dst, uint32_t v) { put_fixed<uint32_t>(dst, v); }
inline void put_u64(std::string* dst, uint64_t v) { put_fixed<uint64_t>(dst, v); }
inline void put_i32(std::string* dst, int32_t v) { put_fixed<int32_t>(dst, v); }
inline void put_i64(std::string* dst, int64_t v) { put_fixed<int64_t>(dst, v); }
inline void put_bool(std::string* dst, bool v) { put_u8(dst, v ? 1 : 0); }

// u32 length + bytes. REQUIRES bytes.size() < 2^32 (messages enforce far smaller limits).
inline void put_bytes(std::string* dst, std::string_view bytes) {
  put_u32(dst, static_cast<uint32_t>(bytes.size()));
  dst->append(bytes.data(), bytes.size());
}

// u32 count + elements, each fixed width little-endian.
template <typename T>
inline void put_array(std::string* dst, std::span<const T> values) {
  put_u32(dst, static_cast<uint32_t>(values.size()));
  size_t at = dst->size();
  dst->resize(at + values.size() * sizeof(T));
  char* out = dst->data() + at;
  for (T v : values) {
    encode_fixed<T>(out, v);
    out += sizeof(T);
  }
}

inline void put_bool_array(std::string* dst, const std::vector<bool>& values) {
  put_u32(dst, static_cast<uint32_t>(values.size()));
  for (bool v : values) put_bool(dst, v);
}

// Consumes a byte string field by field. Every read checks the bytes left first; the
// first failure is kept (naming the field) and later reads return zero values without
// touching the input, so a decoder reads all its fields and checks status() once.
class WireReader {
 public:
  // `context` names the message in errors ("TransferStatus"). `data` must outlive this.
  WireReader(std::string_view context, std::string_view data) : context_(context), rest_(data) {}

  template <typename T>
  T fixed(std::string_view field) {
    if (!need(field, sizeof(T))) return T{};
    T v = decode_fixed<T>(rest_.data());
    rest_.remove_prefix(sizeof(T));
    return v;
  }
  uint8_t u8(std::string_view f) { return fixed<uint8_t>(f); }
  uint16_t u16(std::string_view f) { return fixed<uint16_t>(f); }
  uint32_t u32(std::string_view f) { return fixed<uint32_t>(f); }
  uint64_t u64(std::string_view f) { return fixed<uint64_t>(f); }
  int32_t i32(std::string_view f) { return fixed<int32_t>(f); }
  int64_t i64(std::string_view f) { return fixed<int64_t>(f); }
  // Only 0 and 1 are valid.
  bool boolean(std::string_view field);
  // Fails if the declared length exceeds max_bytes or the bytes present.
  std::string bytes(std::string_view field, size_t max_bytes);

  // Fails if count > max_count or count * sizeof(T) exceeds the bytes present; the
  // check runs before any allocation, so a forged count cannot make us allocate.
  template <typename T>
  std::vector<T> array(std::string_view field, size_t max_count) {
    std::vector<T> out;
    uint32_t count = u32(field);
    if (!status_.ok() || !check_count(field, count, sizeof(T), max_count)) return out;
    out.resize(count);
    for (uint32_t i = 0; i < count; ++i) out[i] = decode_fixed<T>(rest_.data() + i * sizeof(T));
    rest_.remove_prefix(size_t{count} * sizeof(T));
    return out;
  }
  std::vector<bool> bool_array(std::string_view field, size_t max_count);

  // Reads a u32 count for `field` (records of `record_bytes` each) and checks it as
  // array() does; returns 0 on failure. The caller then reads `count` records.
  uint32_t count(std::string_view field, size_t record_bytes, size_t max_count);

  // Records the first failure: "<context>: field '<field>': <why>".
  void fail(std::string_view field, std::string_view why);
  bool ok() const { return status_.ok(); }
  size_t remaining() const { return rest_.size(); }
  // OK only if no read failed and every byte was consumed (trailing bytes are an error:
  // they mean the peer's idea of the layout differs from ours).
  Status finish();

 private:
  bool need(std::string_view field, size_t n);
  bool check_count(std::string_view field, uint64_t count, size_t elem_bytes, size_t max_count);

  std::string context_;
  std::string_view rest_;
  Status status_;
};

}  // namespace pdkv::proto
