// Which transfer queue serves a room: a hash of the sorted set of its destination ids.
//
// Rooms with the same destinations share a queue (so a failed peer fails them in order,
// SPEC §9), and rooms with different destinations spread evenly. The reference summed
// the port parts modulo the queue count, which collides for neighbouring ports and
// breaks on IPv6 "ip:port" strings (SPEC §12 item 13); the ids here are opaque.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace pdkv::kv {

// REQUIRES: shard_count > 0. Order and duplicates of `destinations` do not matter.
size_t destination_shard(std::vector<std::string> destinations, size_t shard_count);

}  // namespace pdkv::kv
