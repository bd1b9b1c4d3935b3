// WriteBlock: one one-sided write descriptor, the unit every engine call is built from.
//
// `src_addr` is a local address, `dst_addr` an address in the peer's memory (which the
// peer must have registered), `length` a byte count, `grant` the peer's write grant the
// bytes land under (write_grant.h; 0 = none, accepted only by a peer that does not
// require grants). "Block" is the name the KV layer and the reference use for one such
// (src, dst, length) write.
// A plain value type: callers build std::vector<WriteBlock> in bulk (reserve once per
// batch), and the engine takes std::span<const WriteBlock>, so there is no per-block heap
// allocation anywhere on the submit path.
#pragma once

#include <cstdint>
#include <type_traits>

namespace pdkv::engine {

struct WriteBlock {
  uint64_t src_addr = 0;
  uint64_t dst_addr = 0;
  uint64_t length = 0;
  uint64_t grant = 0;
};

static_assert(std::is_trivially_copyable_v<WriteBlock>);

}  // namespace pdkv::engine
