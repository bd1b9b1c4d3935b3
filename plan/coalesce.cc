#include "plan/coalesce.h"

#include <limits>
#include <string>

namespace pdkv::plan {
namespace {

// a + 1 == b without overflowing at INT64_MAX.
inline bool steps_by_one(int64_t a, int64_t b) {
  return a != std::numeric_limits<int64_t>::max() && b == a + 1;
}

}  // namespace

Status coalesce_into(std::span<const int64_t> src_pages, std::span<const int64_t> dst_pages,
                     std::vector<PageRun>& out) {
  out.clear();
  if (src_pages.size() != dst_pages.size()) {
    return invalid_argument("src_pages and dst_pages differ in length (" +
                            std::to_string(src_pages.size()) + " vs " +
                            std::to_string(dst_pages.size()) + ")");
  }
  const size_t n = src_pages.size();
  if (n == 0) return Status();
  // Count first so the vector is allocated exactly once.
  size_t runs = 1;
  for (size_t i = 1; i < n; ++i) {
    if (!steps_by_one(src_pages[i - 1], src_pages[i]) ||
        !steps_by_one(dst_pages[i - 1], dst_pages[i])) {
      ++runs;
    }
  }
  out.reserve(runs);
  PageRun run{src_pages[0], dst_pages[0], 1};
  for (size_t i = 1; i < n; ++i) {
    if (steps_by_one(src_pages[i - 1], src_pages[i]) &&
        steps_by_one(dst_pages[i - 1], dst_pages[i])) {
      ++run.count;
    } else {
      out.push_back(run);
      run = PageRun{src_pages[i], dst_pages[i], 1};
    }
  }
  out.push_back(run);
  return Status();
}

Result<std::vector<PageRun>> coalesce(std::span<const int64_t> src_pages,
                                      std::span<const int64_t> dst_pages) {
  std::vector<PageRun> out;
  PDKV_RETURN_IF_ERROR(coalesce_into(src_pages, dst_pages, out));
  return out;
}

}  // namespace pdkv::plan
