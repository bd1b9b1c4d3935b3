// Whether an address range is mapped in this process, asked of the kernel (mincore), so
// a wrong buffer pointer handed to register_memory is a clear error at registration
// instead of a crash later (the checksum pass reads registered memory directly; SIGSEGV
// took down the Python interpreter before this check).
//
// Thread safety: a pure query.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace pdkv::engine {

// OK if every page of [addr, addr + length) is mapped and readable by the CPU;
// OutOfRange naming the first unmapped page otherwise (also for a range that wraps around
// the address space), or the first mapping without read permission (/proc/self/maps):
// CUDA reserves its unified address range with PROT_NONE mappings, so a GPU pointer is
// "mapped" to mincore but must be refused too (pdkv moves host memory only).
Status check_mapped(uint64_t addr, uint64_t length);

}  // namespace pdkv::engine
