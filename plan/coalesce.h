// Coalescing of paired page lists, so each run becomes one block per buffer: split
// wherever src or dst does not step by +1, giving maximal runs (src_first, dst_first,
// count).
//
// Pure function; safe to call concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "plan/types.h"

namespace pdkv::plan {

// REQUIRES nothing of the values (any int64, negatives included: coalescing knows no
// buffer). Different lengths -> InvalidArgument. Empty input -> no runs.
Result<std::vector<PageRun>> coalesce(std::span<const int64_t> src_pages,
                                      std::span<const int64_t> dst_pages);

// Same, appending to `out` (cleared first; reserved once for the exact run count).
Status coalesce_into(std::span<const int64_t> src_pages, std::span<const int64_t> dst_pages,
                     std::vector<PageRun>& out);

}  // namespace pdkv::plan
