#include "engine/device/fake/fake_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <map>

#include "common/mutex.h"

namespace pdkv::fake_cuda {
namespace {

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

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
  if (shadow != nullptr) munmap(shadow, mapped);
  if (base != 0 && owns_address) munmap(reinterpret_cast<void*>(base), reserved);
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
  if (it == r.device.end()) return CUDA_ERROR_INVALID_VALUE;
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

std::shared_ptr<DeviceMapping> find_device_range(uintptr_t ptr, size_t bytes) {
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto it = containing(r.device, ptr, device_size);
  if (it == r.device.end()) return nullptr;
  const DeviceMapping& m = *it->second;
  // The whole range must lie in this one allocation: ptr is inside, so only the end can
  // stray (written to avoid overflow of ptr + bytes).
  if (bytes > m.size - (ptr - m.base)) return nullptr;
  return it->second;
}

}  // namespace pdkv::fake_cuda
