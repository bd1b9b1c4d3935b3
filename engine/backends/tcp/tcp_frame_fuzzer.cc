// libFuzzer target for the TCP frame decoders: arbitrary bytes as a header, then as an
// entry table or ACK body. Neither may crash, hang or allocate beyond the limits.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/backends/tcp/tcp_frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdkv::engine::tcp;
  std::span<const uint8_t> in(data, size);
  auto header = decode_header(in, 1 << 16);
  if (!header.ok() || size < kHeaderSize) return 0;
  std::span<const uint8_t> rest = in.subspan(kHeaderSize);
  if (header->type == FrameType::kPart) {
    std::vector<WireEntry> ranges;
    const size_t table = size_t{header->count} * kEntrySize;
    if (rest.size() >= table) (void)decode_entries(rest.first(table), *header, &ranges);
  } else if (header->type == FrameType::kAck && rest.size() >= header->count) {
    (void)decode_ack_body(rest.first(header->count), *header);
  }
  return 0;
}
