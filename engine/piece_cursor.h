// A position in a list of pieces sent one after another (a part's entries, a lease's
// pieces): the piece it points into and the bytes of that piece already sent. A partial
// write ends anywhere, and the next one resumes at the exact byte.
#pragma once

#include <cstdint>

namespace pdkv::engine {

// Moves the cursor (*piece, *offset) forward by `bytes`, over pieces whose sizes
// `size_of(index)` gives. Finishing a piece exactly leaves the cursor at the start of the
// next one. The caller guarantees that `bytes` does not run past the last piece.
template <class Index, class SizeOf>
void advance_cursor(uint64_t bytes, const SizeOf& size_of, Index* piece, uint64_t* offset) {
  while (bytes > 0) {
    const uint64_t left = size_of(*piece) - *offset;
    if (bytes >= left) {
      bytes -= left;
      ++*piece;
      *offset = 0;
    } else {
      *offset += bytes;
      bytes = 0;
    }
  }
}

}  // namespace pdkv::engine
