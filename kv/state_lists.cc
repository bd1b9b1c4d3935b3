#include "kv/state_lists.h"

#include <string>

namespace pdkv::kv {

Status check_state_lists(const KvArgs& args, StateSlotLists lists) {
  const int64_t groups = args.state_group_count();
  if (lists.group_ends.empty()) {
    if (!lists.slots.empty() && groups > 1) {
      return invalid_argument("state_indices is one list but this rank has " +
                              std::to_string(groups) + " state groups: pass one list per group");
    }
    return Status();
  }
  if (static_cast<int64_t>(lists.group_ends.size()) != groups) {
    return invalid_argument("state_indices has " + std::to_string(lists.group_ends.size()) +
                            " lists but this rank has " + std::to_string(groups) +
                            " state groups (state_buffer_groups / kv_layer_groups)");
  }
  uint32_t previous = 0;
  for (uint32_t end : lists.group_ends) {
    if (end < previous || end > lists.slots.size()) {
      return invalid_argument("state list ends are not monotone inside the " +
                              std::to_string(lists.slots.size()) + " entries");
    }
    previous = end;
  }
  if (previous != lists.slots.size()) {
    return invalid_argument("the last state list ends at " + std::to_string(previous) +
                            ", not at the " + std::to_string(lists.slots.size()) + " entries");
  }
  return Status();
}

size_t state_list_count(StateSlotLists lists) {
  if (!lists.group_ends.empty()) return lists.group_ends.size();
  return lists.slots.empty() ? 0 : 1;
}

std::span<const int64_t> state_list(StateSlotLists lists, size_t g) {
  if (lists.group_ends.empty()) return g == 0 ? lists.slots : std::span<const int64_t>{};
  if (g >= lists.group_ends.size()) return {};
  const size_t begin = g == 0 ? 0 : lists.group_ends[g - 1];
  return lists.slots.subspan(begin, lists.group_ends[g] - begin);
}

}  // namespace pdkv::kv
