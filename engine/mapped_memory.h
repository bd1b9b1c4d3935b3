// Whether an address range is mapped in this process, asked of the kernel (mincore), so
// a wrong buffer pointer handed to register_memory is a clear error at registration
// instead of a crash later (the checksum pass reads registered memory directly; SIGSEGV
// took down the Python interpreter before this check).
//
// A range pdkv will write into (a decode's KV pool) must be writable as well: a read-only
// mapping passes every read check, and the first staged write into it killed the process
// with SIGSEGV. The permissions come from /proc/self/maps, a query that cannot fault.
//
// Thread safety: a pure query.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace pdkv::engine {

// What pdkv does with a host range: reads it (a source) or also writes it (a destination).
enum class HostAccess : uint8_t { kRead, kReadWrite };

// OK if every page of [addr, addr + length) is mapped and readable by the CPU (and, for
// kReadWrite, writable); OutOfRange naming the first unmapped page otherwise (also for a
// range that wraps around the address space), or the first mapping without the permission
// (/proc/self/maps): CUDA reserves its unified address range with PROT_NONE mappings, so
// a GPU pointer is "mapped" to mincore but must be refused too (pdkv moves host memory
// only).
Status check_mapped(uint64_t addr, uint64_t length, HostAccess access = HostAccess::kRead);

}  // namespace pdkv::engine
