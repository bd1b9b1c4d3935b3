// Shared by the proto fuzzers: how a flat fuzz input becomes multipart frames, and the
// check every decoder fuzzer runs.
//
// Input format: repeated { u32 little-endian length, that many bytes }; a length beyond
// the input takes the rest, fewer than 4 bytes left form a last frame. At most
// kMaxFuzzFrames frames, like a receiving ZmqEndpoint. write_fuzz_input is the inverse,
// used to write seed corpora.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "proto/codec.h"
#include "proto/coding.h"

namespace pdkv::proto::fuzz {

inline constexpr size_t kMaxFuzzFrames = 8;

inline std::vector<std::string_view> frames_of(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> frames;
  while (!in.empty() && frames.size() < kMaxFuzzFrames) {
    if (in.size() < 4) {
      frames.push_back(in);
      break;
    }
    uint32_t len = decode_fixed<uint32_t>(in.data());
    in.remove_prefix(4);
    size_t n = len < in.size() ? len : in.size();
    frames.push_back(in.substr(0, n));
    in.remove_prefix(n);
  }
  return frames;
}

inline std::string write_fuzz_input(const Multipart& frames) {
  std::string out;
  for (const std::string& f : frames) {
    put_u32(&out, static_cast<uint32_t>(f.size()));
    out += f;
  }
  return out;
}

// Decodes; on success the encoding must be canonical: re-encoding gives back exactly the
// input frames, and decoding that gives an equal message. Any difference aborts (a crash
// for libFuzzer).
template <typename T, typename DecodeFn>
int check_decoder(const uint8_t* data, size_t size, DecodeFn decode) {
  auto frames = frames_of(data, size);
  Result<T> r = decode(FrameViews(frames));
  if (!r.ok()) return 0;
  Multipart again = encode_message(Message(*r));
  if (again.size() != frames.size()) std::abort();
  for (size_t i = 0; i < again.size(); ++i) {
    if (again[i] != frames[i]) std::abort();
  }
  auto views = views_of(again);
  Result<T> back = decode(FrameViews(views));
  if (!back.ok() || !(*back == *r)) std::abort();
  return 0;
}

}  // namespace pdkv::proto::fuzz
