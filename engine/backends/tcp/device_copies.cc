#include "engine/backends/tcp/device_copies.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace pdkv::engine::tcp {
namespace {

// The plain device copies of one copy_payload call, issued together at its end as one
// batched copy: scattered pages (page size 1, head slices of separate pages) would
// otherwise cost one driver call each. Per thread, so it allocates only while growing.
thread_local std::vector<CopyPiece> t_pieces;

// Runs of fewer pieces go into the batch piece by piece instead of as a strided copy.
constexpr uint64_t kMinStridedRows = 8;

void add_piece(uint64_t mem, uint8_t* slab, uint64_t bytes, bool to_slab) {
  const auto s = reinterpret_cast<uint64_t>(slab);
  t_pieces.push_back(to_slab ? CopyPiece{s, mem, bytes} : CopyPiece{mem, s, bytes});
}

// `rows` pieces of `width` bytes between memory (pitch `stride`) and the slab (packed).
// Device copies that are not strided go to t_pieces.
Status copy_rows(DeviceDriver* driver, DeviceStreamHandle stream, const PayloadRun& run,
                 uint64_t mem, uint64_t width, uint64_t rows, uint8_t* slab, SlabDirection dir) {
  const bool to_slab = dir == SlabDirection::kToSlab;
  if (run.device < 0) {
    for (uint64_t r = 0; r < rows; ++r) {
      auto* m = reinterpret_cast<uint8_t*>(mem + r * run.stride);
      uint8_t* s = slab + r * width;
      if (to_slab) {
        std::memcpy(s, m, width);
      } else {
        std::memcpy(m, s, width);
      }
    }
    return Status();
  }
  if (rows == 1 || run.stride == width) {  // contiguous in memory: one plain copy
    add_piece(mem, slab, width * rows, to_slab);
    return Status();
  }
  // Pieces in different allocations cannot be one strided copy; a short run (the planner
  // folds any two neighbouring blocks of a shuffled page list into a run of 2) is cheaper
  // inside the batch than as a 2-D copy of its own.
  if (run.piecewise || rows < kMinStridedRows) {
    for (uint64_t r = 0; r < rows; ++r) {
      add_piece(mem + r * run.stride, slab + r * width, width, to_slab);
    }
    return Status();
  }
  StridedCopy copy;
  copy.width = width;
  copy.rows = rows;
  copy.to_device = !to_slab;
  if (to_slab) {
    copy.src = mem;
    copy.src_pitch = run.stride;
    copy.dst = reinterpret_cast<uint64_t>(slab);
    copy.dst_pitch = width;
  } else {
    copy.src = reinterpret_cast<uint64_t>(slab);
    copy.src_pitch = width;
    copy.dst = mem;
    copy.dst_pitch = run.stride;
  }
  return driver->copy_strided(stream, copy);
}

}  // namespace

Status copy_payload(DeviceDriver* driver, DeviceStreamHandle stream,
                    std::span<const PayloadRun> runs, uint64_t begin, uint64_t end, uint8_t* slab,
                    SlabDirection direction, PayloadCursor* cursor) {
  t_pieces.clear();
  const uint64_t slab_start = begin;  // payload offset of slab[0]
  while (cursor->run < runs.size() && begin < end) {
    const PayloadRun& run = runs[cursor->run];
    const uint64_t run_end = cursor->run_offset + run.bytes();
    if (run_end <= begin) {
      cursor->run_offset = run_end;
      ++cursor->run;
      continue;
    }
    // Bytes [from, to) of this run, relative to its start.
    const uint64_t from = begin - cursor->run_offset;
    const uint64_t to = std::min(end, run_end) - cursor->run_offset;
    uint64_t at = from;
    while (at < to) {
      const uint64_t piece = at / run.length;
      const uint64_t within = at % run.length;
      const uint64_t mem = run.addr + piece * run.stride + within;
      uint8_t* s = slab + (cursor->run_offset + at - slab_start);
      if (within != 0 || to - at < run.length) {
        // A partial piece at either end of the range.
        const uint64_t n = std::min(run.length - within, to - at);
        PDKV_RETURN_IF_ERROR(copy_rows(driver, stream, run, mem, n, 1, s, direction));
        at += n;
      } else {
        // Whole pieces: one (strided) copy for all of them.
        const uint64_t rows = (to - at) / run.length;
        PDKV_RETURN_IF_ERROR(copy_rows(driver, stream, run, mem, run.length, rows, s, direction));
        at += rows * run.length;
      }
    }
    if (std::min(end, run_end) == run_end) {
      cursor->run_offset = run_end;
      ++cursor->run;
    }
    begin = std::min(end, run_end);
  }
  return driver->copy_batch(stream, t_pieces, direction == SlabDirection::kFromSlab);
}

}  // namespace pdkv::engine::tcp
