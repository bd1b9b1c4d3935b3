#include "kv/decode/room_grant.h"

#include <map>

#include "common/cluster_key.h"

namespace pdkv::kv {
namespace {

std::vector<RankGrantBuffers::Group> item_groups(const std::vector<uint64_t>& ptrs,
                                                 const std::vector<uint64_t>& lens,
                                                 const std::vector<uint64_t>& item_lens) {
  std::map<uint64_t, std::vector<engine::ItemBuffer>> by_items;
  for (size_t i = 0; i < ptrs.size() && i < lens.size() && i < item_lens.size(); ++i) {
    if (lens[i] == 0 || item_lens[i] == 0) continue;
    by_items[(lens[i] + item_lens[i] - 1) / item_lens[i]].push_back(
        {ptrs[i], lens[i], item_lens[i]});
  }
  std::vector<RankGrantBuffers::Group> out;
  for (auto& [items, buffers] : by_items) {
    out.push_back(
        {std::make_shared<const std::vector<engine::ItemBuffer>>(std::move(buffers)), items});
  }
  return out;
}

void add_sets(const std::vector<RankGrantBuffers::Group>& groups, std::span<const int64_t> items,
              engine::WriteGrant& grant) {
  for (const RankGrantBuffers::Group& g : groups) {
    engine::ItemSet set{g.buffers, {}};
    set.items.reserve(items.size());
    for (int64_t item : items) {
      if (item >= 0 && static_cast<uint64_t>(item) < g.items) {
        set.items.push_back(static_cast<uint64_t>(item));
      }
    }
    if (!set.items.empty()) grant.sets.push_back(std::move(set));
  }
}

}  // namespace

RankGrantBuffers::RankGrantBuffers(const KvArgs& args)
    : kv(item_groups(args.kv_data_ptrs, args.kv_data_lens, args.kv_item_lens)),
      aux(item_groups(args.aux_data_ptrs, args.aux_data_lens, args.aux_item_lens)),
      state(item_groups(args.state_data_ptrs, args.state_data_lens, args.state_item_lens)) {}

engine::WriteGrant grant_for_room(const RankGrantBuffers& buffers, const RoomWrites& writes) {
  engine::WriteGrant grant;
  add_sets(buffers.kv, writes.kv_pages, grant);
  add_sets(buffers.kv, writes.l1_5_local_pages, grant);
  if (writes.aux_index)
    add_sets(buffers.aux, std::span<const int64_t>(&*writes.aux_index, 1), grant);
  add_sets(buffers.state, writes.state_slots, grant);
  return grant;
}

uint64_t random_grant_id() {
  uint64_t id = 0;
  while (id == 0) id = ClusterKey::random_u64();
  return id;
}

uint64_t random_secret_id() { return random_grant_id(); }

}  // namespace pdkv::kv
