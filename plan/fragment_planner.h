// The heterogeneous-TP fragment planner: the reference's, with two of its faults fixed
// (token-major pages sliced by head, and prefill ranks that are never told a room needs
// nothing from them; both below).
//
// Runs on the decode side: given both sides' layouts it tells one decode rank which
// prefill ranks to pre-allocate at, with which fragments, and the fan-out numbers.
//
// Head ownership (docs/API.md): with H KV heads and TP size T, rank r holds heads
// [r*H/T, (r+1)*H/T) when H >= T (T must divide H), and head r*H/T when H < T (H must
// divide T: a GQA replica group of T/H ranks holds each head). Each decode head is taken
// from one prefill rank: its only holder, or, inside a replica group, the member closest
// to d*P/D (so P == D is always the identity and MLA keeps the reference's routes: one
// prefill rank per decode rank).
//
// Page geometry: a page of a rank with h local heads is h*S*head_dim*dtype_bytes bytes,
// either token-major "NHD" (token, head, dim) or head-major "HND" (head, token, dim).
// Fragments are the maximal byte ranges that are contiguous on both sides: for NHD with
// a partial head range and S > 1 that is one fragment per token (the reference's one
// range per page copied tokens instead of heads); for HND one per head run.
// MLA latent buffers (is_mla, one head) are copied whole. A buffer whose pages are
// spaced wider than the page (kv_page_strides) gets the same byte ranges, stepping by
// each side's stride.
//
// Prefill ranks from which no decode rank needs anything (GQA replicas, MLA with
// D < P) are "idle"; decode rank p*D/P names each idle rank p as a dummy target
// (no pages) so that it learns the room needs nothing from it (in the reference such a
// rank waited in Bootstrapping until it timed out).
// State buffers: P == D copies whole slots from the identity target; otherwise a slot
// is either sharded (item_p*P == item_d*D, contiguous shards) or replicated (equal
// items, taken from rank d*P/D); anything else is an error.
//
// Pure; safe to call concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "plan/types.h"

namespace pdkv::plan {

enum class PageLayout : uint8_t { kNHD, kHND };

struct KvGeometry {
  int64_t total_kv_heads = 0;  // heads of the model, not of one rank
  int64_t head_dim = 0;        // elements per head (MLA: latent width)
  int64_t dtype_bytes = 0;
};

struct SideLayout {
  int64_t tp_size = 1;
  int64_t page_size = 1;  // tokens per page; must be equal on both sides
  PageLayout page_layout = PageLayout::kNHD;
  bool is_mla = false;
  KvGeometry target;
  std::optional<KvGeometry> draft;  // draft_k/draft_v buffers; default = target
  // Kind of each KV buffer, by buffer index (target_k, target_v, draft_k, draft_v);
  // must be identical on both sides.
  std::vector<BufferKind> kv_buffer_kinds;
  // Optional: when non-empty, checked against the geometry (one per KV buffer).
  std::vector<uint64_t> kv_item_lens;
  // Optional, one per KV buffer: bytes from one page to the next (0 = the item, packed
  // pages). Fragments step by these; their byte ranges stay inside the item.
  std::vector<uint64_t> kv_page_strides;
  // Bytes of one slot of each state buffer of one rank (empty = no state buffers).
  std::vector<uint64_t> state_item_lens;
};

struct PrefillTarget {
  int32_t prefill_rank = 0;
  bool dummy = false;                 // pre-allocate with no pages: the room needs nothing from it
  bool send_state = false;            // send this target the state slots
  int32_t required_dst_info_num = 0;  // decode ranks that pre-allocate at this prefill rank
  std::vector<Fragment> fragments;    // empty: default blocks (identity) or dummy
};

struct FragmentPlan {
  bool identity = false;                      // one target (this rank's peer), no fragments
  std::vector<PrefillTarget> targets;         // ascending prefill rank
  int32_t required_prefill_response_num = 0;  // non-dummy targets
  std::vector<int32_t> idle_prefill_ranks;    // ranks no decode rank takes data from
};

Result<FragmentPlan> plan_fragments(const SideLayout& prefill, const SideLayout& decode,
                                    int64_t decode_rank);

// Heads [first, first + count) held by `rank` of `tp` ranks with `heads` KV heads.
struct HeadRange {
  int64_t first = 0;
  int64_t count = 0;
};
Result<HeadRange> heads_of_rank(int64_t rank, int64_t tp, int64_t heads);

}  // namespace pdkv::plan
