// Hybrid-model state-slot blocks, the reference's send_mamba_cache plan.
//
// Each state buffer item is one slot. Order of rules (the reference's):
//   1. no state buffers on either side, or a slot list missing -> no blocks;
//   2. buffer counts differ -> InvalidArgument;
//   3. slot lists of different length -> InvalidArgument, except one source slot with
//      several destination slots, which is broadcast to all of them;
//   4. with buffer_groups (one group per buffer) only the buffers of `group` are kept;
//      with a layer range (either bound given; missing begin = 0, missing end = no upper
//      bound) state_layer_ids must have one id per buffer, and only buffers whose id is
//      in [begin, end) are kept;
//   5. pairs with a negative slot on either side are dropped; the rest are coalesced;
//   6. if any state fragment exists, each kept buffer copies only its own state
//      fragments (none = skipped), else each run is one block of count * item_len.
// Blocks are in buffer order, merged where one continues the previous (see blocks.h for
// the validation done on addresses). Pure; safe to call concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "plan/blocks.h"
#include "plan/types.h"

namespace pdkv::plan {

struct StateSlots {
  std::optional<std::span<const int64_t>> src_slots;  // nullopt = none given
  std::optional<std::span<const int64_t>> dst_slots;
  std::optional<std::span<const int64_t>> state_layer_ids;
  std::optional<int64_t> begin_layer;
  std::optional<int64_t> end_layer;
  // State groups: the group of each buffer (empty = every buffer in every call) and the
  // group whose buffers these slots are for.
  std::span<const int64_t> buffer_groups = {};
  int64_t group = 0;
};

// `buffers` describes the state buffers (item = slot).
Result<std::vector<Block>> state_blocks(const BufferTable& buffers, const StateSlots& slots,
                                        std::span<const Fragment> fragments);

}  // namespace pdkv::plan
