// RoomRoute: which prefill ranks of a DP group a decode rank pre-allocates at, and what
// it asks of each, computed from both sides' layouts.
//
// Rules: a prefill running the MLA L1.5 cache (partial pages per rank) is asked by every
// decode rank for its owned pages (every prefill rank a target, D pre-allocations each,
// P responses awaited). Otherwise plan::plan_fragments decides: identity (P == D), head
// slicing for heterogeneous TP, MLA latents copied whole, GQA replicas, and prefill ranks
// nobody needs named as dummies so they learn that the room needs nothing from them.
//
// The route depends on the instance, not the room, so a decode computes it once per
// bootstrap address. Pure.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "kv/kv_args.h"
#include "kv/route/route_directory.h"
#include "plan/fragment_planner.h"
#include "proto/messages.h"

namespace pdkv::kv {

// A target's fragment list, shared by every room routed through it: a head split lists
// one fragment per token and buffer (tens of KB), which rooms must not each copy.
using WireFragments = std::shared_ptr<const std::vector<proto::Fragment>>;

struct RouteTarget {
  int64_t prefill_tp_rank = 0;
  proto::PreAllocKind kind = proto::PreAllocKind::kTransfer;
  bool send_state = false;
  uint32_t required_dst_info_num = 1;
  WireFragments fragments = std::make_shared<const std::vector<proto::Fragment>>();  // not null
};

struct RoomRoute {
  std::vector<RouteTarget> targets;  // ascending prefill rank
  uint32_t required_prefill_response_num = 1;
};

Result<RoomRoute> plan_route(const KvArgs& decode, const PrefillRankInfo& prefill);

// The planner's view of one side.
plan::SideLayout side_layout(int64_t tp_size, const proto::KvLayout& layout,
                             const std::vector<uint64_t>& kv_item_lens,
                             const std::vector<uint64_t>& state_item_lens);

}  // namespace pdkv::kv
