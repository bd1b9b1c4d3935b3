// The optional end-to-end check of a room's bytes (PDKV_VERIFY_CHECKSUM: a transport bug
// or a stray writer must become a Failed room, never silent corruption).
//
// The prefill sums what it sends to one decode rank, block by block in send order, and
// ships crc32c(concatenated bytes) with the list of destination regions in that order.
// The decode, once every byte has landed (the status follows the data on each rank's
// ordered path), re-reads exactly those regions. The region list comes from the network,
// so every region is first checked to lie inside memory this rank registered: a peer
// cannot make the decode read outside its own buffers.
// Device memory (`device_regions`) is never read by the CPU: its bytes are summed from a
// staged copy (engine/device/registered_bytes.h).
// Thread safety: TransferChecksum is not thread-safe (one room's chunks run on one queue).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/device/device_regions.h"
#include "engine/memory_registry.h"
#include "engine/write_block.h"
#include "engine/write_grant.h"

namespace pdkv::kv {

class TransferChecksum {
 public:
  // Sums the source bytes of `writes` (local memory) and records their destinations,
  // merging a region that continues the previous one (same checksum, shorter list).
  // A device read that fails is returned (the sum is then unusable).
  Status add(std::span<const engine::WriteBlock> writes, const engine::DeviceRegions& device);
  uint32_t value() const { return crc_; }
  // Flattened [addr, len] pairs for proto::TransferStatus::checksum_ranges.
  const std::vector<uint64_t>& ranges() const { return ranges_; }

 private:
  uint32_t crc_ = 0;
  std::vector<uint64_t> ranges_;
};

// What one room opened to its prefill ranks (its write grant, normalized, and the bytes it
// covers): the regions a status of that room may name. Built once when the room is granted.
struct GrantedDestination {
  engine::WriteGrant grant;
  uint64_t bytes = 0;
};
Result<GrantedDestination> granted_destination(engine::WriteGrant grant);

// OK if `ranges` is a list of non-empty [addr, len] pairs, each inside `granted`, naming
// at most granted.bytes in all (a prefill rank names each byte it wrote once, and writes
// only what the room granted); InvalidArgument naming the first violation otherwise.
// Run before any byte is re-read, so a status can cost at most one re-read of its own
// room: a list longer than the room could fill is refused in O(1), any other in
// O(ranges x log(items)) without touching the memory.
Status check_ranges_granted(std::span<const uint64_t> ranges, const GrantedDestination& granted);

// InvalidArgument if `ranges` is malformed or leaves `registered` (the same registry check
// the engine's receivers apply to writes); DataLoss naming both values if the bytes there
// do not sum to `expected`.
Status verify_transfer_checksum(uint32_t expected, std::span<const uint64_t> ranges,
                                const engine::MemoryRegistry& registered,
                                const engine::DeviceRegions& device);

}  // namespace pdkv::kv
