#include "kv/decode/room_grant.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "common/cluster_key.h"

namespace pdkv::kv {
namespace {

// One buffer as the grant sees it: a page every `stride` bytes, `item` bytes each.
struct PagedBuffer {
  uint64_t ptr, len, item, stride;
};

// Buffers cut into grant units of gcd(item, stride) bytes, grouped by how their pages map
// to units and how many units they hold; buffers that overlap (FlashInfer's K and V of
// one block) go to different groups, as a grant's set may not hold overlapping buffers.
std::vector<RankGrantBuffers::Group> item_groups(const std::vector<PagedBuffer>& paged) {
  struct Key {
    uint64_t stride_items, page_items, units;
    bool operator<(const Key& o) const {
      return std::tie(stride_items, page_items, units) <
             std::tie(o.stride_items, o.page_items, o.units);
    }
  };
  std::map<Key, std::vector<engine::ItemBuffer>> by_key;
  for (const PagedBuffer& b : paged) {
    if (b.len == 0 || b.item == 0) continue;
    const uint64_t unit = std::gcd(b.item, b.stride);
    by_key[Key{b.stride / unit, b.item / unit, (b.len + unit - 1) / unit}].push_back(
        {b.ptr, b.len, unit});
  }
  std::vector<RankGrantBuffers::Group> out;
  for (auto& [key, buffers] : by_key) {
    std::sort(
        buffers.begin(), buffers.end(),
        [](const engine::ItemBuffer& a, const engine::ItemBuffer& b) { return a.base < b.base; });
    std::vector<std::vector<engine::ItemBuffer>> sets;
    for (const engine::ItemBuffer& b : buffers) {
      auto fits = [&](const std::vector<engine::ItemBuffer>& set) {
        return set.back().base + set.back().length <= b.base;
      };
      auto it = std::find_if(sets.begin(), sets.end(), fits);
      if (it == sets.end()) {
        sets.push_back({b});
      } else {
        it->push_back(b);
      }
    }
    for (auto& set : sets) {
      out.push_back({std::make_shared<const std::vector<engine::ItemBuffer>>(std::move(set)),
                     key.units, key.stride_items, key.page_items});
    }
  }
  return out;
}

std::vector<PagedBuffer> packed(const std::vector<uint64_t>& ptrs,
                                const std::vector<uint64_t>& lens,
                                const std::vector<uint64_t>& item_lens) {
  std::vector<PagedBuffer> out;
  for (size_t i = 0; i < ptrs.size() && i < lens.size() && i < item_lens.size(); ++i) {
    out.push_back({ptrs[i], lens[i], item_lens[i], item_lens[i]});
  }
  return out;
}

// The KV buffers of each page space: index 0 = the chunked layers (and buffers no layer
// names), 1 + g = state group g's layers. A buffer may serve several spaces: vLLM's
// hybrid allocator lays one layer of each KV cache group over the same memory (its
// groups draw distinct block ids from one pool), so the grant opens, in that buffer,
// the pages of each group's list through a set of that group's own.
std::vector<std::vector<PagedBuffer>> kv_spaces(const KvArgs& a) {
  const size_t spaces = 1 + static_cast<size_t>(a.state_group_count());
  std::vector<std::vector<bool>> in(a.kv_data_ptrs.size(), std::vector<bool>(spaces, false));
  for (size_t l = 0; l < a.layer_buffers.size(); ++l) {
    for (int64_t b : a.layer_buffers[l]) {
      in[static_cast<size_t>(b)][static_cast<size_t>(a.kv_layer_group(l) + 1)] = true;
    }
  }
  std::vector<std::vector<PagedBuffer>> out(spaces);
  for (size_t b = 0; b < a.kv_data_ptrs.size(); ++b) {
    const bool named = std::find(in[b].begin(), in[b].end(), true) != in[b].end();
    for (size_t s = 0; s < spaces; ++s) {
      if (in[b][s] || (!named && s == 0)) {
        out[s].push_back(
            {a.kv_data_ptrs[b], a.kv_data_lens[b], a.kv_item_lens[b], a.kv_page_stride(b)});
      }
    }
  }
  return out;
}

std::vector<std::vector<RankGrantBuffers::Group>> state_groups(const KvArgs& a) {
  std::vector<std::vector<PagedBuffer>> by_group(static_cast<size_t>(a.state_group_count()));
  for (size_t s = 0; s < a.state_data_ptrs.size(); ++s) {
    by_group[static_cast<size_t>(a.state_buffer_group(s))].push_back(
        {a.state_data_ptrs[s], a.state_data_lens[s], a.state_item_lens[s], a.state_page_stride(s)});
  }
  std::vector<std::vector<RankGrantBuffers::Group>> out;
  for (const auto& buffers : by_group) out.push_back(item_groups(buffers));
  return out;
}

void add_sets(const std::vector<RankGrantBuffers::Group>& groups, std::span<const int64_t> pages,
              engine::WriteGrant& grant) {
  for (const RankGrantBuffers::Group& g : groups) {
    engine::ItemSet set{g.buffers, {}};
    set.items.reserve(pages.size() * g.page_items);
    for (int64_t page : pages) {
      if (page < 0) continue;
      const auto first = static_cast<uint64_t>(page);
      if (first > (g.items - 1) / g.stride_items) continue;  // past the end (no overflow)
      for (uint64_t k = 0; k < g.page_items; ++k) {
        const uint64_t item = first * g.stride_items + k;
        if (item < g.items) set.items.push_back(item);
      }
    }
    if (!set.items.empty()) grant.sets.push_back(std::move(set));
  }
}

}  // namespace

RankGrantBuffers::RankGrantBuffers(const KvArgs& args)
    : aux(item_groups(packed(args.aux_data_ptrs, args.aux_data_lens, args.aux_item_lens))),
      state_of_group(state_groups(args)) {
  auto spaces = kv_spaces(args);
  kv = item_groups(spaces[0]);
  for (size_t g = 1; g < spaces.size(); ++g) kv_of_group.push_back(item_groups(spaces[g]));
}

engine::WriteGrant grant_for_room(const RankGrantBuffers& buffers, const RoomWrites& writes) {
  engine::WriteGrant grant;
  add_sets(buffers.kv, writes.kv_pages, grant);
  add_sets(buffers.kv, writes.l1_5_local_pages, grant);
  if (writes.aux_index)
    add_sets(buffers.aux, std::span<const int64_t>(&*writes.aux_index, 1), grant);
  for (size_t g = 0; g < state_list_count(writes.state); ++g) {
    const auto list = state_list(writes.state, g);
    if (g < buffers.state_of_group.size()) add_sets(buffers.state_of_group[g], list, grant);
    if (g < buffers.kv_of_group.size()) add_sets(buffers.kv_of_group[g], list, grant);
  }
  return grant;
}

uint64_t random_grant_id() {
  uint64_t id = 0;
  while (id == 0) id = ClusterKey::random_u64();
  return id;
}

uint64_t random_secret_id() { return random_grant_id(); }

}  // namespace pdkv::kv
