// The fake driver's inter-process memory: legacy IPC handles, peer access, and
// device-to-device copies (the virtual-memory API and its POSIX file-descriptor handles
// are in fake_vmm_exports.cc). Handles really cross processes, so pdkv's same-host device
// path runs in CI between separate processes:
//  - a legacy handle (cuIpcGetMemHandle) names the exporter's pid, the number of the
//    allocation's memfd there and its inode; the opener reopens /proc/<pid>/fd/<n> (the
//    same user's process: what real CUDA IPC needs too) and checks the inode, so a stale
//    or forged handle is CUDA_ERROR_INVALID_HANDLE, never some other file;
// Memory opened here joins the fake's device memory (fake_memory.h): PROT_NONE to the CPU
// at the returned address, reached by copies through a read-write shadow.
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

// Leaked on purpose, like the fake's other tables (stream threads may run at exit).
struct Tables {
  pdkv::Mutex mu;
  std::set<uintptr_t> opened PDKV_GUARDED_BY(mu);  // legacy handles opened here
  std::set<std::pair<int, int>> peers PDKV_GUARDED_BY(mu);
};

Tables& tables() {
  static Tables* t = new Tables();
  return *t;
}

// Maps the memfd twice: PROT_NONE at a fresh reservation with a guard page, and
// read-write as the shadow.
std::shared_ptr<fc::DeviceMapping> map_fd(int fd, size_t size, CUcontext ctx) {
  const size_t page = page_size();
  auto m = std::make_shared<fc::DeviceMapping>();
  m->size = size;
  m->mapped = (size + page - 1) / page * page;
  m->reserved = m->mapped + page;
  m->ctx = ctx;
  void* where =
      mmap(nullptr, m->reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (where == MAP_FAILED) return nullptr;
  m->base = reinterpret_cast<uintptr_t>(where);
  void* device = mmap(where, m->mapped, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0);
  void* shadow = mmap(nullptr, m->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (device == MAP_FAILED || shadow == MAP_FAILED) return nullptr;  // m unmaps
  m->shadow = static_cast<uint8_t*>(shadow);
  return m;
}

int current_device(CUcontext ctx) { return ctx->device; }

}  // namespace

bool fc::peer_capable(int device, int peer) {
  if (device == peer) return true;
  const char* off = std::getenv("PDKV_FAKE_CUDA_NO_PEER");
  return off == nullptr || *off == '\0' || *off == '0';
}

// --- Legacy IPC handles ----------------------------------------------------------------

PDKV_FAKE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fc::DeviceRange range = fc::find_device_range(static_cast<uintptr_t>(ptr), 1);
  // Only a cuMemAlloc allocation, named by its base: not managed memory, not a VMM piece,
  // not memory this process opened from another.
  if (range.pieces.empty()) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<fc::DeviceMapping>& m = range.pieces.front();
  if (m->base != ptr || m->managed || m->reservation != 0 || m->fd < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  {
    Tables& t = tables();
    pdkv::MutexLock lock(t.mu);
    if (t.opened.count(m->base) != 0) return CUDA_ERROR_INVALID_VALUE;
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
    if (!fc::peer_capable(here, h.device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
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
  auto m = map_fd(fd, h.size, ctx);
  if (m == nullptr) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  m->fd = fd;  // closed with the mapping; not exportable again (`opened` is checked)
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

// --- Peer access and device identity ---------------------------------------------------

PDKV_FAKE_EXPORT CUresult cuDeviceCanAccessPeer(int* can_access, CUdevice device, CUdevice peer) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (can_access == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fc::primary_context(device) == nullptr || fc::primary_context(peer) == nullptr) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *can_access = device != peer && fc::peer_capable(device, peer) ? 1 : 0;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!fc::is_context(peer)) return CUDA_ERROR_INVALID_CONTEXT;
  if (peer->device == ctx->device) return CUDA_ERROR_INVALID_DEVICE;
  if (!fc::peer_capable(ctx->device, peer->device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
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
