#include "plan/schedule.h"

#include <algorithm>
#include <string>

namespace pdkv::plan {

Result<std::vector<LayerGroup>> layer_groups(int64_t layer_num, int64_t interval,
                                             int64_t begin_cache_step) {
  if (layer_num < 0) {
    return invalid_argument("negative layer_num " + std::to_string(layer_num));
  }
  // Models have at most thousands of layers; a huge count is a caller bug, and planning
  // it would allocate and loop without bound.
  if (layer_num > kMaxLayers) {
    return invalid_argument("layer_num " + std::to_string(layer_num) + " exceeds " +
                            std::to_string(kMaxLayers));
  }
  interval = std::max<int64_t>(interval, 1);
  std::vector<LayerGroup> out;
  out.reserve(static_cast<size_t>(layer_num / interval + 1));
  for (int64_t begin = 0; begin < layer_num;) {
    const int64_t end = layer_num - begin > interval ? begin + interval : layer_num;
    int64_t step;
    if (__builtin_add_overflow(begin_cache_step, end - 1, &step)) {
      return out_of_range("begin_cache_step + layer overflows int64");
    }
    out.push_back(LayerGroup{begin, end, step});
    begin = end;
  }
  return out;
}

}  // namespace pdkv::plan
