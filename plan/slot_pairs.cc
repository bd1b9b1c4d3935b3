#include "plan/slot_pairs.h"

#include <string>

namespace pdkv::plan {

Status pair_slots(std::span<const int64_t> src, std::span<const int64_t> dst,
                  std::vector<int64_t>& src_out, std::vector<int64_t>& dst_out) {
  src_out.clear();
  dst_out.clear();
  const bool broadcast = src.size() == 1 && dst.size() > 1;
  if (src.size() != dst.size() && !broadcast) {
    return invalid_argument("slot count mismatch: " + std::to_string(src.size()) + " source vs " +
                            std::to_string(dst.size()) + " destination entries");
  }
  src_out.reserve(dst.size());
  dst_out.reserve(dst.size());
  for (size_t i = 0; i < dst.size(); ++i) {
    const int64_t s = broadcast ? src[0] : src[i];
    if (s >= 0 && dst[i] >= 0) {
      src_out.push_back(s);
      dst_out.push_back(dst[i]);
    }
  }
  return Status();
}

}  // namespace pdkv::plan
