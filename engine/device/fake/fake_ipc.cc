// The fake driver's inter-process memory: legacy IPC handles, the virtual-memory API
// (cuMemCreate / cuMemMap) with POSIX file-descriptor handles, peer access, and
// device-to-device copies. Handles really cross processes, so pdkv's same-host device
// path runs in CI between separate processes:
//  - a legacy handle (cuIpcGetMemHandle) names the exporter's pid, the number of the
//    allocation's memfd there and its inode; the opener reopens /proc/<pid>/fd/<n> (the
//    same user's process: what real CUDA IPC needs too) and checks the inode, so a stale
//    or forged handle is CUDA_ERROR_INVALID_HANDLE, never some other file;
//  - a cuMemCreate allocation is a memfd; cuMemExportToShareableHandle hands out a dup of
//    it, which crosses processes the way the driver's does: over a Unix socket with
//    SCM_RIGHTS. Its memfd name carries the device it lives on.
// Memory opened or mapped here joins the fake's device memory (fake_memory.h): PROT_NONE
// to the CPU at the returned address, reached by copies through a read-write shadow.
// A mapped piece becomes usable only once cuMemSetAccess granted it, as on a GPU.
//
// Peer access: the fake's devices can all reach each other unless PDKV_FAKE_CUDA_NO_PEER=1
// (then cuDeviceCanAccessPeer says 0 and memory of another device cannot be opened or
// granted). A device never needs peer access to itself.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/mutex.h"
#include "engine/device/cuda_driver_api.h"
#include "engine/device/fake/fake_memory.h"
#include "engine/device/fake/fake_state.h"
#include "engine/device/fake/fake_stream.h"

#define PDKV_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace fc = pdkv::fake_cuda;

namespace {

constexpr uint32_t kLegacyMagic = 0x49564b50;  // "PKVI"
constexpr size_t kGranularity = 2u << 20;      // the driver's minimum on current GPUs
constexpr const char* kVmmName = "pdkv-fake-cuda-vmm-d";

struct LegacyHandle {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  int32_t device;
  uint64_t inode;
  uint64_t size;
};
static_assert(sizeof(LegacyHandle) <= CU_IPC_HANDLE_SIZE);

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// A cuMemCreate (or imported) allocation: its memfd, closed with the last reference.
struct Allocation {
  int fd = -1;
  size_t size = 0;
  int device = 0;
  bool exportable = false;
  ~Allocation() {
    if (fd >= 0) close(fd);
  }
};

struct HandleEntry {
  std::shared_ptr<Allocation> allocation;
  int refs = 0;
};

struct Piece {
  std::shared_ptr<fc::DeviceMapping> mapping;
  std::shared_ptr<Allocation> allocation;
  CUmemGenericAllocationHandle handle = 0;  // the handle it was mapped from
  bool accessible = false;
};

// Leaked on purpose, like the fake's other tables (stream threads may run at exit).
struct Tables {
  pdkv::Mutex mu;
  CUmemGenericAllocationHandle next_handle PDKV_GUARDED_BY(mu) = 1;
  std::map<CUmemGenericAllocationHandle, HandleEntry> handles PDKV_GUARDED_BY(mu);
  std::map<uintptr_t, size_t> reservations PDKV_GUARDED_BY(mu);
  std::map<uintptr_t, Piece> pieces PDKV_GUARDED_BY(mu);  // by mapped address
  std::set<uintptr_t> opened PDKV_GUARDED_BY(mu);         // legacy handles opened here
  std::set<std::pair<int, int>> peers PDKV_GUARDED_BY(mu);
};

Tables& tables() {
  static Tables* t = new Tables();
  return *t;
}

bool peer_capable(int device, int peer) {
  if (device == peer) return true;
  const char* off = std::getenv("PDKV_FAKE_CUDA_NO_PEER");
  return off == nullptr || *off == '\0' || *off == '0';
}

// Maps the memfd twice (PROT_NONE at `at`, or at a fresh reservation with a guard page
// when `at` is 0; and read-write as the shadow).
std::shared_ptr<fc::DeviceMapping> map_fd(int fd, size_t size, uintptr_t at, CUcontext ctx) {
  const size_t page = page_size();
  auto m = std::make_shared<fc::DeviceMapping>();
  m->size = size;
  m->mapped = (size + page - 1) / page * page;
  m->ctx = ctx;
  void* where = reinterpret_cast<void*>(at);
  if (at == 0) {
    m->reserved = m->mapped + page;
    where =
        mmap(nullptr, m->reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (where == MAP_FAILED) return nullptr;
  } else {
    m->reserved = m->mapped;
    m->owns_address = false;
  }
  m->base = reinterpret_cast<uintptr_t>(where);
  void* device = mmap(where, m->mapped, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0);
  void* shadow = mmap(nullptr, m->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (device == MAP_FAILED || shadow == MAP_FAILED) return nullptr;  // m unmaps
  m->shadow = static_cast<uint8_t*>(shadow);
  return m;
}

// Gives [addr, addr + size) back to its reservation: no memory behind it any more.
void unreserve_view(uintptr_t addr, size_t size) {
  mmap(reinterpret_cast<void*>(addr), size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

int current_device(CUcontext ctx) { return ctx->device; }

// The device a VMM memfd lives on, from its name ("/memfd:pdkv-fake-cuda-vmm-d3 (deleted)").
int memfd_device(int fd) {
  char path[64];
  char name[256];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, name, sizeof name - 1);
  if (n <= 0) return -1;
  name[n] = '\0';
  const char* at = std::strstr(name, kVmmName);
  if (at == nullptr) return -1;
  return std::atoi(at + std::strlen(kVmmName));
}

}  // namespace

// --- Legacy IPC handles ----------------------------------------------------------------

PDKV_FAKE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto m = fc::find_device_range(static_cast<uintptr_t>(ptr), 1);
  // Only a cuMemAlloc allocation, named by its base: not managed memory, not a VMM piece,
  // not memory this process opened from another.
  if (m == nullptr || m->base != ptr || m->managed || !m->owns_address || m->fd < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct stat st {};
  if (fstat(m->fd, &st) != 0) return CUDA_ERROR_INVALID_VALUE;
  LegacyHandle h{kLegacyMagic,   static_cast<int32_t>(getpid()),   m->fd,
                 m->ctx->device, static_cast<uint64_t>(st.st_ino), m->size};
  std::memset(handle->reserved, 0, sizeof handle->reserved);
  std::memcpy(handle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* ptr, CUipcMemHandle handle,
                                                unsigned flags) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || (flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  LegacyHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.magic != kLegacyMagic || h.size == 0) return CUDA_ERROR_INVALID_HANDLE;
  // The driver refuses a handle in the process that exported it.
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  const int here = current_device(ctx);
  if (h.device != here) {
    if (!peer_capable(here, h.device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    Tables& t = tables();
    pdkv::MutexLock lock(t.mu);
    if ((flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == 0 && !t.peers.count({here, h.device})) {
      return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    }
  }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != h.inode ||
      static_cast<uint64_t>(st.st_size) < h.size) {
    close(fd);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  auto m = map_fd(fd, h.size, 0, ctx);
  if (m == nullptr) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  m->fd = fd;  // closed with the mapping; not exportable again (owns_address is checked)
  const uintptr_t base = m->base;
  fc::add_device_mapping(std::move(m));
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  t.opened.insert(base);
  *ptr = base;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  {
    Tables& t = tables();
    pdkv::MutexLock lock(t.mu);
    if (t.opened.erase(static_cast<uintptr_t>(ptr)) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  fc::remove_device_mapping(static_cast<uintptr_t>(ptr));  // unmapped when no copy holds it
  return CUDA_SUCCESS;
}

// --- The virtual-memory API ------------------------------------------------------------

PDKV_FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                        const CUmemAllocationProp* prop,
                                                        int option) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (granularity == nullptr || prop == nullptr || option < 0 || option > 1) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                      const CUmemAllocationProp* prop, unsigned long long flags) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 || size % kGranularity != 0 ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      fc::primary_context(prop->location.id) == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::string name = kVmmName + std::to_string(prop->location.id);
  auto a = std::make_shared<Allocation>();
  a->fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (a->fd < 0 || ftruncate(a->fd, static_cast<off_t>(size)) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  a->size = size;
  a->device = prop->location.id;
  a->exportable = (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  *handle = t.next_handle++;
  t.handles[*handle] = HandleEntry{std::move(a), 1};
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  auto it = t.handles.find(handle);
  if (it == t.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second.refs == 0) t.handles.erase(it);  // mapped pieces keep the memory
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                              CUdeviceptr addr, unsigned long long flags) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ptr == nullptr || size == 0 || size % kGranularity != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  (void)alignment, (void)addr;  // a hint; page alignment is all the fake's mappings need
  void* where = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (where == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  t.reservations[reinterpret_cast<uintptr_t>(where)] = size;
  *ptr = reinterpret_cast<CUdeviceptr>(where);
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  auto it = t.reservations.find(static_cast<uintptr_t>(ptr));
  if (it == t.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  // Every piece must have been unmapped first.
  auto piece = t.pieces.lower_bound(static_cast<uintptr_t>(ptr));
  if (piece != t.pieces.end() && piece->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  t.reservations.erase(it);
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                   CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (flags != 0 || offset != 0) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  auto h = t.handles.find(handle);
  if (h == t.handles.end()) return CUDA_ERROR_INVALID_HANDLE;
  const std::shared_ptr<Allocation>& a = h->second.allocation;
  if (size != a->size) return CUDA_ERROR_INVALID_VALUE;
  // Inside one reservation, over no other piece.
  auto r = t.reservations.upper_bound(static_cast<uintptr_t>(ptr));
  if (r == t.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr - r->first > r->second || size > r->second - (ptr - r->first)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto next = t.pieces.lower_bound(static_cast<uintptr_t>(ptr));
  if (next != t.pieces.end() && next->first < ptr + size) return CUDA_ERROR_ALREADY_MAPPED;
  if (next != t.pieces.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.mapping->size > ptr) return CUDA_ERROR_ALREADY_MAPPED;
  }
  auto m = map_fd(a->fd, size, static_cast<uintptr_t>(ptr), fc::primary_context(a->device));
  if (m == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  t.pieces[static_cast<uintptr_t>(ptr)] = Piece{std::move(m), a, handle, false};
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                         size_t count) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  auto first = t.pieces.find(static_cast<uintptr_t>(ptr));
  if (first == t.pieces.end()) return CUDA_ERROR_INVALID_VALUE;
  // The range must be whole mapped pieces, back to back.
  uintptr_t at = ptr;
  auto it = first;
  while (at < ptr + size) {
    if (it == t.pieces.end() || it->first != at) return CUDA_ERROR_INVALID_VALUE;
    at += it->second.mapping->size;
    ++it;
  }
  if (at != ptr + size) return CUDA_ERROR_INVALID_VALUE;
  for (auto p = first; p != it; ++p) {
    for (size_t i = 0; i < count; ++i) {
      const CUmemAccessDesc& d = desc[i];
      if (d.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
          fc::primary_context(d.location.id) == nullptr ||
          d.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      if (!peer_capable(d.location.id, p->second.allocation->device)) {
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
      }
    }
  }
  for (auto p = first; p != it; ++p) {
    if (!p->second.accessible) fc::add_device_mapping(p->second.mapping);
    p->second.accessible = true;
  }
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  auto first = t.pieces.find(static_cast<uintptr_t>(ptr));
  if (first == t.pieces.end()) return CUDA_ERROR_INVALID_VALUE;
  auto it = first;
  uintptr_t at = ptr;
  while (at < ptr + size && it != t.pieces.end() && it->first == at) {
    at += it->second.mapping->size;
    ++it;
  }
  if (at != ptr + size) return CUDA_ERROR_INVALID_VALUE;
  for (auto p = first; p != it; ++p) {
    if (p->second.accessible) fc::remove_device_mapping(p->first);
    unreserve_view(p->first, p->second.mapping->mapped);
  }
  t.pieces.erase(first, it);
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                      void* addr) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto p = reinterpret_cast<uintptr_t>(addr);
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  auto it = t.pieces.upper_bound(p);
  if (it == t.pieces.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (p - it->first >= it->second.mapping->size) return CUDA_ERROR_INVALID_VALUE;
  // The handle it was mapped from, one more reference (a released one is made anew).
  HandleEntry& entry = t.handles[it->second.handle];
  if (entry.allocation == nullptr) entry.allocation = it->second.allocation;
  ++entry.refs;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemExportToShareableHandle(void* shareable,
                                                       CUmemGenericAllocationHandle handle,
                                                       int handle_type, unsigned long long flags) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (shareable == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  auto h = t.handles.find(handle);
  if (h == t.handles.end()) return CUDA_ERROR_INVALID_HANDLE;
  // Only an allocation created asking for this handle type can be exported as one.
  if (!h->second.allocation->exportable) return CUDA_ERROR_NOT_SUPPORTED;
  const int fd = fcntl(h->second.allocation->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                         void* os_handle, int handle_type) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  struct stat st {};
  const int device = memfd_device(fd);
  if (fd < 0 || fstat(fd, &st) != 0 || device < 0 || fc::primary_context(device) == nullptr ||
      st.st_size <= 0 || static_cast<size_t>(st.st_size) % kGranularity != 0) {
    return CUDA_ERROR_INVALID_HANDLE;  // not a handle this driver exported
  }
  auto a = std::make_shared<Allocation>();
  a->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the caller still owns (and closes) its fd
  if (a->fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  a->size = static_cast<size_t>(st.st_size);
  a->device = device;
  a->exportable = true;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  *handle = t.next_handle++;
  t.handles[*handle] = HandleEntry{std::move(a), 1};
  return CUDA_SUCCESS;
}

// --- Peer access and device identity ---------------------------------------------------

PDKV_FAKE_EXPORT CUresult cuDeviceCanAccessPeer(int* can_access, CUdevice device, CUdevice peer) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (can_access == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fc::primary_context(device) == nullptr || fc::primary_context(peer) == nullptr) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *can_access = device != peer && peer_capable(device, peer) ? 1 : 0;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!fc::is_context(peer)) return CUDA_ERROR_INVALID_CONTEXT;
  if (peer->device == ctx->device) return CUDA_ERROR_INVALID_DEVICE;
  if (!peer_capable(ctx->device, peer->device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  Tables& t = tables();
  pdkv::MutexLock lock(t.mu);
  if (!t.peers.insert({ctx->device, peer->device}).second) {
    return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  }
  return CUDA_SUCCESS;
}

// The same ordinal is the same fake GPU in every process (one machine, one set of GPUs).
PDKV_FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice device) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fc::primary_context(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  std::memcpy(uuid->bytes, "pdkv-fake-gpu", 13);
  uuid->bytes[15] = static_cast<char>(device);
  return CUDA_SUCCESS;
}

// --- Device-to-device copies -----------------------------------------------------------

PDKV_FAKE_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                               CUstream stream) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (stream->ctx != ctx) return fc::kErrorInvalidHandle;
  fc::CopyDesc c;
  c.src = {CU_MEMORYTYPE_DEVICE, static_cast<uintptr_t>(src), bytes};
  c.dst = {CU_MEMORYTYPE_DEVICE, static_cast<uintptr_t>(dst), bytes};
  c.width = bytes;
  c.height = 1;
  return fc::enqueue_copy(stream, c);
}
