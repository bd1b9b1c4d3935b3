#include "engine/device/fake/fake_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "common/mutex.h"
#include "engine/device/fake/fake_state.h"

namespace pdkv::fake_cuda {

// A cuMemCreate (or imported) allocation: a memfd, closed with the last reference (its
// handle's, or a mapped piece's: cuMemRelease while mapped keeps the pages).
struct Physical {
  int fd = -1;
  size_t size = 0;
  CUcontext ctx = nullptr;
  bool exportable = false;
  ~Physical() {
    if (fd >= 0) close(fd);
  }
};

namespace {

// A physical allocation's memfd is named after its device, so that a process importing
// the descriptor learns where the memory lives ("/memfd:pdkv-fake-cuda-piece-d3 (deleted)").
constexpr const char* kPieceName = "pdkv-fake-cuda-piece-d";

int memfd_device(int fd) {
  char path[64];
  char name[256];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, name, sizeof name - 1);
  if (n <= 0) return -1;
  name[n] = '\0';
  const char* at = std::strstr(name, kPieceName);
  if (at == nullptr) return -1;
  return std::atoi(at + std::strlen(kPieceName));
}

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// A cuMemAddressReserve range: the device view and the shadow view, both PROT_NONE where
// nothing is mapped, each followed by a guard page.
struct Reservation {
  size_t size = 0;
  uint8_t* shadow = nullptr;
};

// A handle to a physical allocation and its references (cuMemCreate, cuMemImport...,
// cuMemRetainAllocationHandle each add one; cuMemRelease drops one).
struct HandleEntry {
  std::shared_ptr<Physical> physical;
  int refs = 0;
};

struct HostBlock {
  size_t size = 0;
  size_t mapped = 0;
  CUcontext ctx = nullptr;
};

// Leaked on purpose (never destroyed at exit): a stream thread still running when the
// process exits may look an address up.
struct Registry {
  Mutex mu;
  // Keyed by base address; the allocation containing p is the last one with base <= p.
  std::map<uintptr_t, std::shared_ptr<DeviceMapping>> device PDKV_GUARDED_BY(mu);
  std::map<uintptr_t, HostBlock> host PDKV_GUARDED_BY(mu);
  std::map<uintptr_t, Reservation> reservations PDKV_GUARDED_BY(mu);
  std::map<CUmemGenericAllocationHandle, HandleEntry> handles PDKV_GUARDED_BY(mu);
  CUmemGenericAllocationHandle next_handle PDKV_GUARDED_BY(mu) = 1;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

template <typename Map>
auto containing(Map& map, uintptr_t ptr, size_t size_of(const typename Map::mapped_type&)) {
  auto it = map.upper_bound(ptr);
  if (it == map.begin()) return map.end();
  --it;
  return ptr - it->first < size_of(it->second) ? it : map.end();
}

size_t device_size(const std::shared_ptr<DeviceMapping>& m) { return m->size; }
size_t host_size(const HostBlock& b) { return b.size; }

}  // namespace

DeviceMapping::~DeviceMapping() {
  if (reservation != 0) {
    // Back to reserved-but-unmapped: the addresses stay the reservation's.
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED;
    mmap(shadow, mapped, PROT_NONE, flags, -1, 0);
    mmap(reinterpret_cast<void*>(base), mapped, PROT_NONE, flags, -1, 0);
    return;
  }
  if (shadow != nullptr) munmap(shadow, mapped);
  if (base != 0) munmap(reinterpret_cast<void*>(base), reserved);
  if (fd >= 0) close(fd);
}

CUresult alloc_device(size_t bytes, CUcontext ctx, bool managed, CUdeviceptr* out) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t page = page_size();
  auto m = std::make_shared<DeviceMapping>();
  m->size = bytes;
  m->mapped = (bytes + page - 1) / page * page;
  m->reserved = m->mapped + page;
  m->ctx = ctx;
  m->managed = managed;
  int fd = memfd_create("pdkv-fake-cuda", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, static_cast<off_t>(m->mapped)) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Reserve the allocation and its guard page, then put the memfd over the first part,
  // still PROT_NONE: the device address the CPU must never touch.
  void* reserve =
      mmap(nullptr, m->reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  m->base = reinterpret_cast<uintptr_t>(reserve);
  void* device = mmap(reserve, m->mapped, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0);
  void* shadow = mmap(nullptr, m->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  m->fd = fd;  // closed with the mapping; IPC exports it
  if (device == MAP_FAILED || shadow == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;  // m unmaps
  m->shadow = static_cast<uint8_t*>(shadow);
  Registry& r = registry();
  MutexLock lock(r.mu);
  r.device.emplace(m->base, m);
  *out = m->base;
  return CUDA_SUCCESS;
}

CUresult free_device(CUdeviceptr ptr) {
  std::shared_ptr<DeviceMapping> doomed;  // unmapped after the lock is dropped
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto it = r.device.find(static_cast<uintptr_t>(ptr));
  if (it == r.device.end() || it->second->reservation != 0) return CUDA_ERROR_INVALID_VALUE;
  doomed = std::move(it->second);
  r.device.erase(it);
  return CUDA_SUCCESS;
}

void add_device_mapping(std::shared_ptr<DeviceMapping> mapping) {
  Registry& r = registry();
  MutexLock lock(r.mu);
  const uintptr_t base = mapping->base;
  r.device[base] = std::move(mapping);
}

std::shared_ptr<DeviceMapping> remove_device_mapping(uintptr_t base) {
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto it = r.device.find(base);
  if (it == r.device.end()) return nullptr;
  auto mapping = std::move(it->second);
  r.device.erase(it);
  return mapping;
}

CUresult alloc_pinned_host(size_t bytes, CUcontext ctx, void** out) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t page = page_size();
  HostBlock block{bytes, (bytes + page - 1) / page * page, ctx};
  void* p = mmap(nullptr, block.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Registry& r = registry();
  MutexLock lock(r.mu);
  r.host.emplace(reinterpret_cast<uintptr_t>(p), block);
  *out = p;
  return CUDA_SUCCESS;
}

CUresult free_pinned_host(void* ptr) {
  size_t mapped = 0;
  {
    Registry& r = registry();
    MutexLock lock(r.mu);
    auto it = r.host.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == r.host.end()) return CUDA_ERROR_INVALID_VALUE;
    mapped = it->second.mapped;
    r.host.erase(it);
  }
  munmap(ptr, mapped);
  return CUDA_SUCCESS;
}

PointerInfo lookup(uintptr_t ptr) {
  PointerInfo info;
  Registry& r = registry();
  MutexLock lock(r.mu);
  if (auto it = containing(r.device, ptr, device_size); it != r.device.end()) {
    const DeviceMapping& m = *it->second;
    info = {PointerKind::kDevice, m.base, m.size, m.ctx, m.managed};
  } else if (auto h = containing(r.host, ptr, host_size); h != r.host.end()) {
    info = {PointerKind::kPinnedHost, h->first, h->second.size, h->second.ctx, false};
  }
  return info;
}

DeviceRange find_device_range(uintptr_t ptr, size_t bytes) {
  DeviceRange range;
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto it = containing(r.device, ptr, device_size);
  if (it == r.device.end()) return range;
  // The range may run on into the next mapped piece of the same reservation (the device
  // addresses and the shadows are contiguous there), never into another allocation.
  // Written to avoid overflow of ptr + bytes.
  size_t left = bytes;
  uintptr_t at = ptr;
  while (it != r.device.end() && it->first <= at && it->second->accessible) {
    const DeviceMapping& m = *it->second;
    range.pieces.push_back(it->second);
    const size_t here = m.size - (at - m.base);
    if (left <= here) return range;
    if (m.reservation == 0) break;
    left -= here;
    at = m.base + m.size;
    ++it;
    if (it == r.device.end() || it->first != at || it->second->reservation != m.reservation) break;
  }
  range.pieces.clear();
  return range;
}

size_t vmm_granularity() { return 2u << 20; }  // what GPUs report today

CUresult reserve_address(size_t size, CUdeviceptr* out) {
  if (out == nullptr || size == 0 || size % vmm_granularity() != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t page = page_size();
  const size_t granule = vmm_granularity();
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  // Aligned to the granularity, as the driver's reservations are: over-reserve, then give
  // back what lies before the aligned start and after the guard page.
  void* raw = mmap(nullptr, size + page + granule, PROT_NONE, flags, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto raw_start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (raw_start + granule - 1) / granule * granule;
  if (start > raw_start) munmap(raw, start - raw_start);
  const uintptr_t tail = start + size + page;
  if (raw_start + size + page + granule > tail) {
    munmap(reinterpret_cast<void*>(tail), raw_start + size + page + granule - tail);
  }
  void* device = reinterpret_cast<void*>(start);
  void* shadow = mmap(nullptr, size, PROT_NONE, flags, -1, 0);
  if (shadow == MAP_FAILED) {
    munmap(device, size + page);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Registry& r = registry();
  MutexLock lock(r.mu);
  r.reservations.emplace(reinterpret_cast<uintptr_t>(device),
                         Reservation{size, static_cast<uint8_t*>(shadow)});
  *out = reinterpret_cast<uintptr_t>(device);
  return CUDA_SUCCESS;
}

CUresult free_address(CUdeviceptr ptr, size_t size) {
  Reservation doomed;
  {
    Registry& r = registry();
    MutexLock lock(r.mu);
    auto it = r.reservations.find(static_cast<uintptr_t>(ptr));
    if (it == r.reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
    for (const auto& [base, m] : r.device) {
      if (m->reservation == it->first) return CUDA_ERROR_INVALID_VALUE;  // still mapped
    }
    doomed = it->second;
    r.reservations.erase(it);
  }
  munmap(reinterpret_cast<void*>(ptr), size + page_size());
  munmap(doomed.shadow, size);
  return CUDA_SUCCESS;
}

CUresult create_physical(size_t size, CUcontext ctx, bool exportable,
                         CUmemGenericAllocationHandle* out) {
  if (out == nullptr || size == 0 || size % vmm_granularity() != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto p = std::make_shared<Physical>();
  const std::string name = kPieceName + std::to_string(ctx->device);
  p->fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (p->fd < 0 || ftruncate(p->fd, static_cast<off_t>(size)) != 0) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p->size = size;
  p->ctx = ctx;
  p->exportable = exportable;
  Registry& r = registry();
  MutexLock lock(r.mu);
  *out = r.next_handle++;
  r.handles.emplace(*out, HandleEntry{std::move(p), 1});
  return CUDA_SUCCESS;
}

CUresult release_physical(CUmemGenericAllocationHandle handle) {
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto it = r.handles.find(handle);
  if (it == r.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second.refs == 0) r.handles.erase(it);  // mapped pieces keep the memory
  return CUDA_SUCCESS;
}

CUresult retain_physical(uintptr_t addr, CUmemGenericAllocationHandle* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto it = containing(r.device, addr, device_size);
  if (it == r.device.end() || it->second->physical == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The handle it was mapped from, one more reference (a released one is listed anew).
  HandleEntry& entry = r.handles[it->second->handle];
  if (entry.physical == nullptr) entry.physical = it->second->physical;
  ++entry.refs;
  *out = it->second->handle;
  return CUDA_SUCCESS;
}

CUresult export_physical(CUmemGenericAllocationHandle handle, int* fd_out) {
  if (fd_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto it = r.handles.find(handle);
  if (it == r.handles.end()) return CUDA_ERROR_INVALID_HANDLE;
  // Only an allocation created asking for this handle type can be exported as one.
  if (!it->second.physical->exportable) return CUDA_ERROR_NOT_SUPPORTED;
  const int fd = fcntl(it->second.physical->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *fd_out = fd;
  return CUDA_SUCCESS;
}

CUresult import_physical(int fd, CUmemGenericAllocationHandle* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  struct stat st {};
  const int device = fd < 0 ? -1 : memfd_device(fd);
  CUctx_st* ctx = device < 0 ? nullptr : primary_context(device);
  if (ctx == nullptr || fstat(fd, &st) != 0 || st.st_size <= 0 ||
      static_cast<size_t>(st.st_size) % vmm_granularity() != 0) {
    return CUDA_ERROR_INVALID_HANDLE;  // not a handle this driver exported
  }
  auto p = std::make_shared<Physical>();
  p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the caller still owns (and closes) its fd
  if (p->fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  p->size = static_cast<size_t>(st.st_size);
  p->ctx = ctx;
  p->exportable = true;
  Registry& r = registry();
  MutexLock lock(r.mu);
  *out = r.next_handle++;
  r.handles.emplace(*out, HandleEntry{std::move(p), 1});
  return CUDA_SUCCESS;
}

CUresult map_piece(CUdeviceptr ptr, size_t size, size_t offset,
                   CUmemGenericAllocationHandle handle) {
  const size_t granule = vmm_granularity();
  const auto at = static_cast<uintptr_t>(ptr);
  if (size == 0 || size % granule != 0 || offset % granule != 0 || at % granule != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto entry = r.handles.find(handle);
  if (entry == r.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<Physical>& phys = entry->second.physical;
  if (offset > phys->size || size > phys->size - offset) return CUDA_ERROR_INVALID_VALUE;
  auto res = r.reservations.upper_bound(at);
  if (res == r.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --res;
  if (at - res->first >= res->second.size || size > res->second.size - (at - res->first)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Nothing mapped there yet.
  auto next = r.device.lower_bound(at);
  if (next != r.device.end() && next->first < at + size) return CUDA_ERROR_INVALID_VALUE;
  if (auto prev = containing(r.device, at, device_size); prev != r.device.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint8_t* shadow = res->second.shadow + (at - res->first);
  const int fd = phys->fd;
  const auto off = static_cast<off_t>(offset);
  if (mmap(reinterpret_cast<void*>(at), size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, off) ==
          MAP_FAILED ||
      mmap(shadow, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off) == MAP_FAILED) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto m = std::make_shared<DeviceMapping>();
  m->base = at;
  m->size = size;
  m->mapped = size;
  m->shadow = shadow;
  m->ctx = phys->ctx;
  m->physical = phys;
  m->handle = handle;
  m->reservation = res->first;
  m->accessible = false;  // until cuMemSetAccess, as with the driver
  r.device.emplace(at, std::move(m));
  return CUDA_SUCCESS;
}

CUresult unmap_pieces(CUdeviceptr ptr, size_t size) {
  std::vector<std::shared_ptr<DeviceMapping>> doomed;  // unmapped after the lock is dropped
  const auto at = static_cast<uintptr_t>(ptr);
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto it = r.device.find(at);
  size_t covered = 0;
  for (auto p = it; p != r.device.end() && covered < size; ++p) {
    if (p->first != at + covered || p->second->reservation == 0) return CUDA_ERROR_INVALID_VALUE;
    covered += p->second->size;
  }
  if (it == r.device.end() || covered != size) return CUDA_ERROR_INVALID_VALUE;
  while (it != r.device.end() && it->first < at + size) {
    doomed.push_back(std::move(it->second));
    it = r.device.erase(it);
  }
  return CUDA_SUCCESS;
}

CUresult set_access(CUdeviceptr ptr, size_t size, const int* devices, size_t count) {
  const auto at = static_cast<uintptr_t>(ptr);
  Registry& r = registry();
  MutexLock lock(r.mu);
  size_t covered = 0;
  for (auto p = r.device.find(at); p != r.device.end() && covered < size; ++p) {
    if (p->first != at + covered || p->second->reservation == 0) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; ++i) {
      if (!peer_capable(devices[i], p->second->ctx->device)) {
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
      }
    }
    covered += p->second->size;
  }
  if (covered != size) return CUDA_ERROR_INVALID_VALUE;
  for (auto p = r.device.find(at); p != r.device.end() && p->first < at + size; ++p) {
    p->second->accessible = true;
  }
  return CUDA_SUCCESS;
}

}  // namespace pdkv::fake_cuda
