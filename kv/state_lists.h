// StateSlotLists: a room's state-group index lists (docs/API.md, "State groups"), as the
// managers take them: one flat list plus the end of each group's part.
//
// A room with G state groups carries G lists; group g is slots[ends[g-1], ends[g]) with
// ends[-1] = 0. No ends = one list, all of `slots` (the single-list form, valid when the
// rank has at most one group). check_state_lists() holds both forms to the rank's group
// count, so a room never reaches a peer with the wrong number of lists.
// Thread safety: a view (spans); pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "kv/kv_args.h"

namespace pdkv::kv {

struct StateSlotLists {
  std::span<const int64_t> slots;
  std::span<const uint32_t> group_ends;  // empty = one list
};

// InvalidArgument, naming both counts, unless `lists` holds the rank's group count of
// lists (or the single-list form with at most one group) with monotone ends inside
// `slots` and the last one at its end.
Status check_state_lists(const KvArgs& args, StateSlotLists lists);

// The lists' count: ends' size, or 1 for the single-list form (0 when it is empty too).
size_t state_list_count(StateSlotLists lists);

// Group g's part of the lists; empty past the last group. REQUIRES: ends checked.
std::span<const int64_t> state_list(StateSlotLists lists, size_t g);

}  // namespace pdkv::kv
