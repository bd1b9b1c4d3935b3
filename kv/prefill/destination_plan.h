// DestinationPlan: everything a prefill needs to turn one room's chunks into writes to
// one decode rank, derived once when that rank's pre-allocation arrives.
//
// It joins three things that arrive separately: the prefill's own KvArgs, the decode's
// BufferRegistration (its buffer addresses and lengths) and the room's PreAllocation
// (destination pages, slots, aux index, L1.5 ownership, TP fragments). create() checks
// that they fit together (buffer counts, prefix alignment, item lengths where no
// fragment reshapes them, ownership lengths) so that a bad pre-allocation fails its room
// at once with a reason, instead of failing a worker later (in the reference such an
// exception killed the worker thread and hung every later room on its queue).
//
// Chunk geometry: a chunk names prefill pages for request pages [first_page,
// first_page + n). The decode holds the first decode_prefix_len / page_size pages
// already and pre-allocated only the pages after them, so those prefix pages are
// skipped and the rest map to destination positions (request page - prefix pages).
//
// Every address a block gets is inside a buffer on both sides (plan/ checks it against
// both sides' lengths).
//
// Memory: the TP fragments depend only on the two ranks' layouts, so every room of one
// decode rank uses the same list (hundreds of entries for a head split, tens of KB): the
// decode sends it once in its registration and its pre-allocations name it, and the
// decode's registered buffers and the prefill's layer table are the same for all its
// rooms. The plan keeps both as shared, immutable parts (PlanSharing), and create()
// reuses the parts it is given when they are equal; a pre-allocation that still carries
// its own list has that wire copy dropped.
// Thread safety: immutable after create(); const methods may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "kv/kv_args.h"
#include "kv/state_lists.h"
#include "plan/blocks.h"
#include "plan/resolve.h"
#include "plan/types.h"
#include "proto/messages.h"

namespace pdkv::kv {

struct ChunkSpec {
  int64_t first_page = 0;          // request-wide page index of pages[0]
  std::span<const int64_t> pages;  // prefill page indices
  // Prefill-side L1.5 ownership of this chunk (required iff the prefill runs L1.5).
  const plan::SrcOwnership* src_l15 = nullptr;
};

using FragmentList = std::shared_ptr<const std::vector<plan::Fragment>>;

// The decode's registered buffers and the prefill's layer table, as every room to that
// decode rank uses them.
struct DestinationBuffers {
  std::vector<uint64_t> kv_ptrs, kv_lens;
  std::vector<uint64_t> kv_strides;  // the decode's page strides (empty = packed)
  std::vector<uint64_t> state_ptrs, state_lens;
  std::vector<uint64_t> state_strides;  // the decode's slot strides (empty = packed)
  std::vector<uint64_t> aux_ptrs, aux_lens, aux_item_lens;
  std::vector<std::vector<int64_t>> layer_buffers;  // the prefill's
  std::vector<int64_t> kv_layer_ids;                // the prefill's
  std::vector<int64_t> kv_layer_groups;             // the prefill's, one per layer
};

// Parts an earlier plan of the same prefill and decode rank holds, offered to the next,
// and the decode's registered fragment list (checked_fragment_list() of its
// BufferRegistration::fragments), which a pre-allocation with fragments_from_registration
// takes; without it create() converts and checks the registration's list itself.
struct PlanSharing {
  FragmentList fragments = {};
  std::shared_ptr<const DestinationBuffers> buffers = {};
  FragmentList registered_fragments = {};
};

// The decode's fragments as plans use them, once each stays inside one of the prefill's
// own pages (so a room's fragments read only the room's pages); else why not. A
// fragment steps by the page strides of both sides' buffers (KvArgs::kv_page_strides and
// state_page_strides, the registration's likewise), whatever strides the decode's planner wrote: a
// byte range inside the item is all it says.
Result<FragmentList> checked_fragment_list(const KvArgs& prefill,
                                           const proto::BufferRegistration& registration,
                                           std::span<const proto::Fragment> fragments);

class DestinationPlan {
 public:
  // `prefill` must outlive the plan. `share`: the parts of an earlier plan created with
  // the same `prefill`; each is taken instead of a copy of its own when equal to it.
  static Result<DestinationPlan> create(const KvArgs& prefill,
                                        const proto::BufferRegistration& registration,
                                        proto::PreAllocation pre_allocation,
                                        const PlanSharing& share = {});

  bool is_dummy() const { return pre_allocation_.kind != proto::PreAllocKind::kTransfer; }
  // Without its fragments (see fragments()).
  const proto::PreAllocation& pre_allocation() const { return pre_allocation_; }
  const FragmentList& fragments() const { return fragments_; }
  PlanSharing shared_parts() const { return {fragments_, buffers_}; }
  int64_t prefix_pages() const { return prefix_pages_; }

  // Source and destination pages of the chunk for this destination (prefix skipped,
  // L1.5 applied, mismatched lengths truncated as the reference does).
  Result<plan::ResolvedIndices> resolve(const ChunkSpec& chunk) const;

  // Appends the KV blocks of every chunked KV layer (group -1) whose global layer id is
  // in [begin_layer_id, end_layer_id) (all layers: 0, INT64_MAX).
  Status append_kv_blocks(const plan::ResolvedIndices& pages, int64_t begin_layer_id,
                          int64_t end_layer_id, std::vector<plan::Block>& out) const;

  // Appends the blocks of every state group (src = the prefill's lists of the last
  // chunk): per group, its lists paired with the decode's (negative entries dropped, one
  // source broadcast), its state buffers' slots (when this rank is a state source of the
  // decode rank) and its KV layers' pages, head-sliced by the same fragments as chunked
  // pages. With a layer range only state buffers and KV layers whose layer id is inside
  // it. A group whose list is empty on either side moves nothing.
  Status append_state_blocks(StateSlotLists src, std::optional<int64_t> begin_layer_id,
                             std::optional<int64_t> end_layer_id,
                             std::vector<plan::Block>& out) const;

  // Appends one block per aux buffer: row src_aux_index of the prefill's buffer to row
  // aux_index of the decode's. Nothing when either side has no aux buffers or the
  // decode sent no aux index.
  Status append_aux_blocks(int64_t src_aux_index, std::vector<plan::Block>& out) const;

 private:
  DestinationPlan() = default;

  // KV blocks of the layers [first, end) of `group` (-1 = chunked) with ids in range.
  Status append_layer_blocks(int64_t group, std::span<const int64_t> src_pages,
                             std::span<const int64_t> dst_pages, int64_t begin_layer_id,
                             int64_t end_layer_id, std::vector<plan::Block>& out) const;
  plan::BufferTable kv_table() const;

  const KvArgs* prefill_ = nullptr;
  proto::PreAllocation pre_allocation_;
  std::shared_ptr<const DestinationBuffers> buffers_;  // never null after create()
  FragmentList fragments_;                             // never null after create()
  int64_t prefix_pages_ = 0;
  // Decode-side L1.5 (dst ON), request-wide.
  bool dst_local_ = false;
  std::vector<uint8_t> dst_mask_;
  std::vector<int64_t> dst_mapping_;  // cumsum(mask) - 1
};

// proto fragments (wire kinds) -> plan fragments (planner kinds).
std::vector<plan::Fragment> to_plan_fragments(std::span<const proto::Fragment> fragments);

}  // namespace pdkv::kv
