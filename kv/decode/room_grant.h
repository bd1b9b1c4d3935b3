// RoomGrant: the write grant a decode rank opens for one room (engine/write_grant.h).
//
// What a room's prefill ranks may write here is exactly what its pre-allocation names:
// its destination pages of every KV buffer of the chunked layers (the pages after the
// decode prefix, and the local pages of an L1.5 partial cache), its aux row of every aux
// buffer, and per state group its list's entries: slots of the group's state buffers
// and pages of the group's KV layers' buffers. A buffer whose pages are strided
// (kv_page_strides, state_page_strides) is granted in units of gcd(item, stride) bytes,
// so only the page's
// own bytes are opened, never the bytes between pages. The grant id is random (libsodium's CSPRNG)
// and travels only in the room's PreAllocation to its own prefill ranks, so no other room, no
// earlier room on the same pages and no stranger can name it.
//
// Thread safety: RankGrantBuffers is immutable after construction; grant_for_room() is a
// pure function.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/write_grant.h"
#include "kv/kv_args.h"
#include "kv/state_lists.h"

namespace pdkv::kv {

// This rank's buffers as item buffers, built once per manager and shared by every grant;
// grouped by how many items they hold, so an item one buffer lacks is left out of that
// buffer's set only.
struct RankGrantBuffers {
  struct Group {
    std::shared_ptr<const std::vector<engine::ItemBuffer>> buffers;
    uint64_t items = 0;  // every buffer of the group holds items [0, items)
    // Page p is items [p * stride_items, p * stride_items + page_items) (1 and 1 unless
    // the buffers' pages are strided).
    uint64_t stride_items = 1;
    uint64_t page_items = 1;
  };
  explicit RankGrantBuffers(const KvArgs& args);
  std::vector<Group> kv;                        // buffers of the chunked KV layers
  std::vector<std::vector<Group>> kv_of_group;  // buffers of each state group's KV layers
  std::vector<Group> aux;
  std::vector<std::vector<Group>> state_of_group;  // each state group's state buffers
};

struct RoomWrites {
  std::span<const int64_t> kv_pages;          // negative entries are skipped
  std::span<const int64_t> l1_5_local_pages;  // empty unless the L1.5 cache is on
  std::optional<int64_t> aux_index;
  StateSlotLists state;  // negative entries are skipped
};

// The grant of one room. An item past a buffer's end is left out (not an error here):
// the prefill's write there is refused by the engine and fails the room with an
// out-of-range cause on both sides, as any write outside registered memory does.
engine::WriteGrant grant_for_room(const RankGrantBuffers& buffers, const RoomWrites& writes);

// A fresh random non-zero grant id.
uint64_t random_grant_id();

// A fresh random non-zero 64-bit value for what only its holders may know: room tickets
// (proto::PreAllocation::ticket) and registration challenges.
uint64_t random_secret_id();

}  // namespace pdkv::kv
