// WriteGrant: the memory a receiver opens to peers for one room (fencing,
// docs/SECURITY.md).
//
// Registered memory says where peers may write at all; a grant narrows that to what one
// request owns: the pages, aux rows and state slots its decode pre-allocated. A decode
// grants them under a random 64-bit id when it sends the room's pre-allocation, the
// prefill names that id on every block it writes (WriteBlock::grant), and the decode
// revokes the grant when the room ends. A write that names a revoked or unknown grant, or
// falls outside the grant's items, is refused before a byte of its part lands: a late
// write of an aborted room cannot corrupt the request that reuses its pages.
//
// Shape: a KV pool is many buffers (one per layer and K/V) cut into equal items (pages),
// and a room owns the same item indices of every buffer. So a grant is a few item sets,
// each "these items of each of these buffers": memory and checks cost O(pages), not
// O(pages x buffers). A plain range is a buffer of one item.
//
// Thread safety: plain values; covers() is a pure function.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"

namespace pdkv::engine {

// One buffer cut into items of item_bytes (the last item may be shorter if length is not
// a multiple; it is still one item).
struct ItemBuffer {
  uint64_t base = 0;
  uint64_t length = 0;
  uint64_t item_bytes = 0;
};

// The items `items` of every buffer in `buffers`.
struct ItemSet {
  // Shared: every room of a rank grants items of the same buffers.
  std::shared_ptr<const std::vector<ItemBuffer>> buffers;
  std::vector<uint64_t> items;
};

// Why a grant is revoked: its room ended some other way (failed, aborted, or the grant
// was never used), or the room succeeded (a late write is then told so: memory_registry.h).
enum class GrantEnd : uint8_t { kWithdrawn, kCompleted };

struct WriteGrant {
  std::vector<ItemSet> sets;

  // One range as a grant of its own (a buffer of one item).
  static WriteGrant of_range(uint64_t addr, uint64_t length);
};

// Sorts and de-duplicates each set's items and orders its buffers by base; then checks:
// every buffer non-empty with item_bytes > 0, no overflow, buffers of a set do not
// overlap, every item inside its buffer. InvalidArgument naming the first violation.
Status normalize_grant(WriteGrant& grant);

// True if every byte of [addr, addr+length) lies in a granted item (a range may span
// consecutive granted items of one buffer). `grant` must be normalized. On false,
// *first_bad (if given) is the first byte not covered. length 0 is covered.
bool grant_covers(const WriteGrant& grant, uint64_t addr, uint64_t length, uint64_t* first_bad);

// Calls fn(addr, length) for each granted item's byte range (tests, registry checks).
template <typename Fn>
void for_each_granted_range(const WriteGrant& grant, Fn&& fn) {
  for (const ItemSet& set : grant.sets) {
    for (const ItemBuffer& b : *set.buffers) {
      for (uint64_t item : set.items) {
        const uint64_t offset = item * b.item_bytes;
        const uint64_t len = b.length - offset < b.item_bytes ? b.length - offset : b.item_bytes;
        fn(b.base + offset, len);
      }
    }
  }
}

}  // namespace pdkv::engine
