#include "engine/write_grant.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>

namespace pdkv::engine {

WriteGrant WriteGrant::of_range(uint64_t addr, uint64_t length) {
  WriteGrant grant;
  grant.sets.push_back(ItemSet{
      std::make_shared<const std::vector<ItemBuffer>>(1, ItemBuffer{addr, length, length}), {0}});
  return grant;
}

Status normalize_grant(WriteGrant& grant) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (ItemSet& set : grant.sets) {
    if (!set.buffers) return invalid_argument("write grant: an item set without buffers");
    if (!std::is_sorted(set.buffers->begin(), set.buffers->end(),
                        [](const ItemBuffer& a, const ItemBuffer& b) { return a.base < b.base; })) {
      auto sorted = std::make_shared<std::vector<ItemBuffer>>(*set.buffers);
      std::sort(sorted->begin(), sorted->end(),
                [](const ItemBuffer& a, const ItemBuffer& b) { return a.base < b.base; });
      set.buffers = std::move(sorted);
    }
    std::sort(set.items.begin(), set.items.end());
    set.items.erase(std::unique(set.items.begin(), set.items.end()), set.items.end());
    uint64_t prev_end = 0;
    for (const ItemBuffer& b : *set.buffers) {
      if (b.length == 0 || b.item_bytes == 0) {
        return invalid_argument(
            fmt::format("write grant: buffer {:#x} has length {} and item size {}", b.base,
                        b.length, b.item_bytes));
      }
      if (b.base > kMax - b.length) {
        return invalid_argument(
            fmt::format("write grant: buffer {:#x}+{} overflows", b.base, b.length));
      }
      if (b.base < prev_end) {
        return invalid_argument(
            fmt::format("write grant: buffer {:#x} overlaps the one before", b.base));
      }
      prev_end = b.base + b.length;
      const uint64_t items = (b.length + b.item_bytes - 1) / b.item_bytes;
      if (!set.items.empty() && set.items.back() >= items) {
        return invalid_argument(
            fmt::format("write grant: item {} is outside buffer {:#x} ({} items of {} bytes)",
                        set.items.back(), b.base, items, b.item_bytes));
      }
    }
  }
  return Status();
}

namespace {

// The buffer of a normalized set holding addr, or nullptr.
const ItemBuffer* buffer_at(const std::vector<ItemBuffer>& buffers, uint64_t addr) {
  auto it = std::upper_bound(buffers.begin(), buffers.end(), addr,
                             [](uint64_t a, const ItemBuffer& b) { return a < b.base; });
  if (it == buffers.begin()) return nullptr;
  --it;
  return addr - it->base < it->length ? &*it : nullptr;
}

// How far from addr the set covers contiguously, looking no further than `need` bytes
// (0 if addr is not in a granted item).
uint64_t covered_from(const ItemSet& set, uint64_t addr, uint64_t need) {
  const ItemBuffer* b = buffer_at(*set.buffers, addr);
  if (b == nullptr) return 0;
  uint64_t item = (addr - b->base) / b->item_bytes;
  auto it = std::lower_bound(set.items.begin(), set.items.end(), item);
  if (it == set.items.end() || *it != item) return 0;
  // Consecutive granted items continue the range (up to what is needed).
  const uint64_t offset = addr - b->base;
  while ((item + 1) * b->item_bytes - offset < need && std::next(it) != set.items.end() &&
         *std::next(it) == item + 1) {
    ++it;
    ++item;
  }
  const uint64_t end = std::min(b->length, (item + 1) * b->item_bytes);
  return end - offset;
}

}  // namespace

bool grant_covers(const WriteGrant& grant, uint64_t addr, uint64_t length, uint64_t* first_bad) {
  if (length == 0) return true;
  if (addr > std::numeric_limits<uint64_t>::max() - length) {
    if (first_bad != nullptr) *first_bad = addr;
    return false;
  }
  uint64_t cursor = addr;
  const uint64_t end = addr + length;
  while (cursor < end) {
    uint64_t step = 0;
    for (const ItemSet& set : grant.sets) {
      step = covered_from(set, cursor, end - cursor);
      if (step > 0) break;
    }
    if (step == 0) {
      if (first_bad != nullptr) *first_bad = cursor;
      return false;
    }
    cursor += std::min(step, end - cursor);
  }
  return true;
}

}  // namespace pdkv::engine
