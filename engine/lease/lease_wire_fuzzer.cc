// libFuzzer target for the lease channel's decoders (wire.h, messages.h) and the path
// channel's, which share its frames (engine/path/path_messages.h): the first
// kFrameHeaderBytes are a frame header, the rest is the payload of the type it names,
// given to that type's decoder. The declared payload size is not matched against the
// rest (recv_frame reads exactly that many bytes), so mutations that change the length
// still reach the decoders. Beyond "no crash": an accepted header and an accepted payload
// must re-encode to the exact input bytes (the decoders are strict, messages.h), else abort.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "engine/lease/messages.h"
#include "engine/lease/wire.h"
#include "engine/path/path_messages.h"

namespace {

using namespace pdkv::engine::lease;  // NOLINT: fuzz target

void require_equal(const std::vector<uint8_t>& encoded, std::span<const uint8_t> input) {
  if (encoded.size() != input.size() ||
      !std::equal(encoded.begin(), encoded.end(), input.begin())) {
    std::abort();
  }
}

template <typename Decoded, typename Encode>
void round_trip(const Decoded& decoded, std::span<const uint8_t> payload, Encode encode) {
  if (!decoded.ok()) return;
  std::vector<uint8_t> out;
  encode(*decoded, &out);
  require_equal(out, payload);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  auto header = decode_frame_header(in);
  if (!header.ok()) return 0;
  std::vector<uint8_t> h(kFrameHeaderBytes);
  encode_frame_header(header->type, header->payload_bytes, h.data());
  require_equal(h, in.first(kFrameHeaderBytes));

  std::span<const uint8_t> payload = in.subspan(kFrameHeaderBytes);
  switch (header->type) {
    case MsgType::kHello: round_trip(decode_hello(payload), payload, encode_hello); break;
    case MsgType::kHelloAck:
      round_trip(decode_hello_ack(payload), payload, encode_hello_ack);
      break;
    case MsgType::kLease: {
      round_trip(decode_lease(payload), payload, [](const LeaseRequest& m, auto* out) {
        std::vector<uint64_t> pairs;
        for (const auto& r : m.ranges) pairs.insert(pairs.end(), {r.addr, r.length, r.grant});
        encode_lease(m.part_id, pairs, out);
      });
      break;
    }
    case MsgType::kGrant: round_trip(decode_grant(payload), payload, encode_grant); break;
    case MsgType::kDone:
    case MsgType::kDoneAck: round_trip(decode_part_id(payload), payload, encode_part_id); break;
    case MsgType::kRegionsReq: break;  // no payload to decode: the server ignores it
    case MsgType::kRegions: round_trip(decode_regions(payload), payload, encode_regions); break;
    case MsgType::kAuthHello:
    case MsgType::kAuthChallenge:
    case MsgType::kAuthProof: {
      std::vector<uint8_t> body(header->type == MsgType::kAuthChallenge ? 64 : 32);
      if (decode_auth_body(payload, body).ok()) require_equal(body, payload);
      break;
    }
    case MsgType::kPathHello:
      round_trip(pdkv::engine::decode_path_hello(payload), payload,
                 pdkv::engine::encode_path_hello);
      break;
    case MsgType::kPathChoice:
      round_trip(pdkv::engine::decode_path_choice(payload), payload,
                 pdkv::engine::encode_path_choice);
      break;
    case MsgType::kAuthRefused: {
      auto reason = decode_auth_refused(payload);
      if (reason.ok()) {
        std::vector<uint8_t> out;
        encode_auth_refused(*reason, &out);
        require_equal(out, payload);
      }
      break;
    }
  }
  return 0;
}
