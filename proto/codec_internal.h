// Helpers shared by the codec_*.cc files; not part of the proto API.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "proto/codec.h"
#include "proto/coding.h"

namespace pdkv::proto::internal {

// Header + body frames.
Multipart frame(MessageType type, std::string body);

// Checks frame count, header and body length for `type`; returns the body frame.
Result<std::string_view> body_of(FrameViews frames, MessageType type);

void put_identity(std::string* dst, const RankIdentity& id);
RankIdentity read_identity(WireReader& r);

// A fragment list: u32 count (checked against the bytes left and kMaxFragments), then
// fixed kFragmentWireBytes records.
void put_fragments(std::string* dst, const std::vector<Fragment>& fragments);
std::vector<Fragment> read_fragments(WireReader& r);

// Reads a u8 that must be <= max_value, as enum E.
template <typename E>
E read_enum(WireReader& r, std::string_view field, uint8_t max_value) {
  uint8_t v = r.u8(field);
  if (v > max_value) {
    r.fail(field,
           "value " + std::to_string(v) + " is out of range 0.." + std::to_string(max_value));
    return E{};
  }
  return static_cast<E>(v);
}

template <typename T>
void put_optional(std::string* dst, const std::optional<T>& v) {
  put_bool(dst, v.has_value());
  if (v) put_fixed<T>(dst, *v);
}

template <typename T>
std::optional<T> read_optional(WireReader& r, std::string_view field) {
  if (!r.boolean(field)) return std::nullopt;
  T v = r.fixed<T>(field);
  if (!r.ok()) return std::nullopt;
  return v;
}

}  // namespace pdkv::proto::internal
