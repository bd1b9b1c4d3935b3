// Memory for large block arrays handed to numpy by pdkv.plan.
//
// A block list for a long prompt is tens of MiB. Fresh memory from the kernel must be
// zeroed page by page, which costs more than planning it, and an engine plans, submits
// and drops such a list for every chunk. So the binding keeps the most recently freed
// large buffer (at most one, at most kMaxCachedBytes) and reuses it for the next list
// that fits; large buffers are mapped with transparent huge pages.
// Requires the GIL (it guards the one spare buffer); numpy frees arrays under the GIL.
#pragma once

#include <pybind11/numpy.h>

#include <cstddef>
#include <cstdint>

namespace pdkv::pyplan {

// An uninitialised (rows, 3) uint64 array whose memory comes from the cache above.
pybind11::array_t<uint64_t> new_row_array(size_t rows);

}  // namespace pdkv::pyplan
