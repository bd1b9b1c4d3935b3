#include "engine/mapped_memory.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace pdkv::engine {
namespace {

// Every mapping overlapping [addr, end) must be readable: a PROT_NONE reservation (how
// CUDA holds its unified address range) passes mincore but faults on the first read. For
// kReadWrite also writable: a PROT_READ mapping faults on the first byte landed in it.
Status check_permissions(uint64_t addr, uint64_t end, HostAccess access) {
  std::ifstream maps("/proc/self/maps");
  if (!maps) return Status();  // no procfs: mincore's answer stands
  std::string line;
  while (std::getline(maps, line)) {
    uint64_t lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s", &lo, &hi, perms) != 3) continue;
    if (hi <= addr || lo >= end) continue;
    if (perms[0] != 'r') {
      return out_of_range(fmt::format(
          "memory [{:#x}, +{}) is not host memory the CPU can read: the mapping {:#x}-{:#x} "
          "has permissions {} (a GPU pointer? pdkv registers host memory only)",
          addr, end - addr, lo, hi, perms));
    }
    if (access == HostAccess::kReadWrite && perms[1] != 'w') {
      return out_of_range(fmt::format(
          "memory [{:#x}, +{}) is not writable: the mapping {:#x}-{:#x} has permissions {}, "
          "and pdkv writes received KV into this buffer (a read-only mmap or a frozen "
          "array?)",
          addr, end - addr, lo, hi, perms));
    }
  }
  return Status();
}

}  // namespace

Status check_mapped(uint64_t addr, uint64_t length, HostAccess access) {
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
            "pointer or length? (pdkv registers host memory only, not GPU memory)",
            addr, length, at));
      }
      return out_of_range(
          fmt::format("memory [{:#x}, +{}) cannot be checked: errno {}", addr, length, errno));
    }
    at += pages * page;
  }
  return check_permissions(addr, end, access);
}

}  // namespace pdkv::engine
