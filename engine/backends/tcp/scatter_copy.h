// scatter_copy: copies a received piece from the staging buffer to its destination with
// streaming (non-temporal) stores where the CPU has them.
//
// Why: a destination that is not in cache (a KV pool of gigabytes) costs an ordinary
// store twice: each cache line is first read from memory (read for ownership), then
// written back. Copies of a few KiB or less never reach the size where the CPU or the
// kernel's `rep movsb` switch that read off, so small pieces landed at about half the
// rate of 32 KiB blocks. Streaming stores write whole lines without reading them
// (BENCHMARKS.md, "Small pieces"). Bytes outside whole 16-byte-aligned chunks, and pieces
// too small to fill a line, go through memcpy.
//
// Thread safety: free functions. Streaming stores are weakly ordered: call
// scatter_fence() after the last copy, before anything tells another thread or process
// that the bytes landed.
#pragma once

#include <cstddef>

namespace pdkv::engine::tcp {

void scatter_copy(void* dst, const void* src, size_t n);
void scatter_fence();

}  // namespace pdkv::engine::tcp
