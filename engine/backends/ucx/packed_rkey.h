// Bounds for a packed UCX rkey received from a peer (kRegions), checked before UCX parses
// it. ucp_ep_rkey_unpack() takes no length: it trusts the layout inside the buffer (UCX's
// ucp_rkey.c, the format ucp_rkey_pack() writes):
//   u64 md_map (host byte order), u8 memory type,
//   then for each set bit of md_map: u8 size, then `size` bytes of that transport's key
// (newer UCX may append a system-device byte and distances, read only when a length is
// given; trailing bytes are therefore allowed). So a truncated or inflated rkey would make
// UCX read past the end of our buffer. check_packed_rkey() walks that layout and refuses
// an rkey whose entries run past its end; padded_rkey() then hands UCX a copy followed by
// zeros, so a transport reading its fixed-size key (at most 255 bytes: UCX asserts it
// when packing) from an entry that declared fewer bytes still stays inside our buffer.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pdkv::engine::ucx {

inline constexpr size_t kRkeyHeaderBytes = 8 + 1;
inline constexpr size_t kRkeyReadSlack = 256;

// DataLoss naming the problem if `packed` is shorter than its header or one of its
// per-transport entries runs past its end.
Status check_packed_rkey(std::string_view packed);
// `packed` followed by kRkeyReadSlack zero bytes (what ucp_ep_rkey_unpack() is given).
std::string padded_rkey(std::string_view packed);

}  // namespace pdkv::engine::ucx
