#include "output_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace pdkv::pyplan {
namespace {

namespace py = pybind11;

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kMinCachedBytes = size_t{4} << 20;    // below: plain malloc, no cache
constexpr size_t kMaxCachedBytes = size_t{512} << 20;  // above: never kept

struct Region {
  void* ptr = nullptr;
  size_t bytes = 0;  // mapped length (a multiple of kHugePage), 0 = malloc'd
};

// The spare region; guarded by the GIL (every caller holds it).
Region g_spare;

Region map_region(size_t want) {
  if (want < kMinCachedBytes) {
    void* p = std::malloc(want ? want : 1);
    if (!p) throw std::bad_alloc();
    return Region{p, 0};
  }
  const size_t bytes = (want + kHugePage - 1) / kHugePage * kHugePage;
  if (g_spare.ptr && g_spare.bytes >= bytes && g_spare.bytes / 2 <= bytes) {
    Region r = g_spare;
    g_spare = Region{};
    return r;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  madvise(p, bytes, MADV_HUGEPAGE);  // best effort
  return Region{p, bytes};
}

void unmap_region(Region r) {
  if (r.bytes == 0) {
    std::free(r.ptr);
    return;
  }
  if (r.bytes <= kMaxCachedBytes) {
    std::swap(r, g_spare);  // keep the newest; drop the older spare
    if (!r.ptr) return;
  }
  munmap(r.ptr, r.bytes);
}

}  // namespace

py::array_t<uint64_t> new_row_array(size_t rows) {
  auto* region = new Region(map_region(rows * 3 * sizeof(uint64_t)));
  py::capsule owner(region, [](void* p) {
    auto* r = static_cast<Region*>(p);
    unmap_region(*r);
    delete r;
  });
  const auto n = static_cast<py::ssize_t>(rows);
  constexpr auto kRow = static_cast<py::ssize_t>(3 * sizeof(uint64_t));
  return py::array_t<uint64_t>({n, py::ssize_t{3}},
                               {kRow, static_cast<py::ssize_t>(sizeof(uint64_t))},
                               static_cast<uint64_t*>(region->ptr), owner);
}

}  // namespace pdkv::pyplan
