// The layerwise streaming schedule: layers [0, layer_num) in groups of
// `interval` (interval < 1 counts as 1); group [begin, end) may be sent once the
// ready-step counter has passed begin_cache_step + end - 1.
//
// Pure; safe to call concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace pdkv::plan {

struct LayerGroup {
  int64_t begin_layer = 0;
  int64_t end_layer = 0;
  int64_t wait_for_cache_step = 0;
  bool operator==(const LayerGroup&) const = default;
};
static_assert(sizeof(LayerGroup) == 3 * sizeof(int64_t), "LayerGroup must be an int64 row");

inline constexpr int64_t kMaxLayers = int64_t{1} << 24;

// layer_num < 0 or > kMaxLayers -> InvalidArgument; 0 -> no groups; a cache step that overflows
// int64
// -> OutOfRange.
Result<std::vector<LayerGroup>> layer_groups(int64_t layer_num, int64_t interval,
                                             int64_t begin_cache_step);

}  // namespace pdkv::plan
