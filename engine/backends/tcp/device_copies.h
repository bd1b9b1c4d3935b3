// Copies between a part's payload, packed in a pinned slab, and the memory its runs name.
//
// A TCP part's payload is its entries' bytes in entry order (tcp_frame.h); when some of
// those bytes live in device memory, the sender first copies them into a pinned slab and
// the receiver lands them from one. This walks payload bytes [begin, end) over the runs
// and issues, per run: the driver's asynchronous copies for device runs (whole pieces of
// a strided run as ONE strided copy: a head-split page of 16 pieces is one driver call),
// and memcpy for host runs (the CPU may touch those).
//
// Thread safety: none; the caller's thread must be bound to the runs' device.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/device/device_driver.h"

namespace pdkv::engine::tcp {

// `pieces` pieces of `length` bytes, the i-th at addr + i * stride; `device` is the
// device ordinal, or DeviceRegions::kHost.
struct PayloadRun {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t pieces = 1;
  uint64_t stride = 0;
  int device = -1;
  // The pieces lie in different device allocations (the planner folds equally spaced
  // entries whatever buffer they are in): one copy per piece, since a strided copy must
  // stay inside one allocation (DeviceRegions::place_run).
  bool piecewise = false;

  uint64_t bytes() const { return length * pieces; }
};

enum class SlabDirection : uint8_t {
  kToSlab,    // sender: memory -> slab
  kFromSlab,  // receiver: slab -> memory
};

// Where a walk stopped, so the next range resumes without rescanning earlier runs.
struct PayloadCursor {
  size_t run = 0;
  uint64_t run_offset = 0;  // payload offset at which runs[run] starts
};

// Moves payload bytes [begin, end) (ascending across calls on one cursor) between `slab`
// (holding exactly those bytes) and the runs. Device copies go on `stream` (they may still
// be running on return: record an event after); host runs are copied before return.
Status copy_payload(DeviceDriver* driver, DeviceStreamHandle stream,
                    std::span<const PayloadRun> runs, uint64_t begin, uint64_t end, uint8_t* slab,
                    SlabDirection direction, PayloadCursor* cursor);

}  // namespace pdkv::engine::tcp
