#include "engine/mapped_memory.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace pdkv::engine {

Status check_mapped(uint64_t addr, uint64_t length) {
  if (length == 0) return Status();
  if (addr + length < addr) {
    return out_of_range(
        fmt::format("memory [{:#x}, +{}) wraps around the address space", addr, length));
  }
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = addr & ~(page - 1);
  const uint64_t end = addr + length;
  // mincore fills one byte per page; asking in chunks keeps that buffer small for pools
  // of many GiB.
  constexpr uint64_t kPagesPerCall = 1 << 16;
  std::vector<unsigned char> residency(kPagesPerCall);
  for (uint64_t at = first; at < end;) {
    const uint64_t pages = std::min(kPagesPerCall, (end - at + page - 1) / page);
    if (::mincore(reinterpret_cast<void*>(at), pages * page, residency.data()) != 0) {
      if (errno == ENOMEM) {
        return out_of_range(fmt::format(
            "memory [{:#x}, +{}) is not mapped in this process near {:#x}: a wrong buffer "
            "pointer or length?",
            addr, length, at));
      }
      return out_of_range(
          fmt::format("memory [{:#x}, +{}) cannot be checked: errno {}", addr, length, errno));
    }
    at += pages * page;
  }
  return Status();
}

}  // namespace pdkv::engine
