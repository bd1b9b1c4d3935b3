// Tests of the fake CUDA driver, loaded the way pdkv loads the real one: dlopen by path and
// dlsym by name, through the function-pointer types of cuda_driver_api.h.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/device/cuda_driver_api.h"

namespace {

struct Fake {
  void* handle = nullptr;
  CUresult count_before_init = CUDA_SUCCESS;
#define PDKV_FAKE_FN(name) PFN_##name name = nullptr;
// One name a line, unformatted: clang-format reflows X-macros differently on each run.
// clang-format off
#define PDKV_FAKE_FNS(X) \
  X(cuInit) \
  X(cuGetErrorString) \
  X(cuGetErrorName) \
  X(cuDeviceGetAttribute) \
  X(cuCtxSynchronize) \
  X(cuMemAddressReserve) \
  X(cuMemAddressFree) \
  X(cuMemCreate) \
  X(cuMemRelease) \
  X(cuMemMap) \
  X(cuMemUnmap) \
  X(cuMemSetAccess) \
  X(cuMemGetAllocationGranularity) \
  X(cuMemcpyBatchAsync_v2) \
  X(cuDeviceGetCount) \
  X(cuDeviceGet) \
  X(cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxRelease_v2) \
  X(cuCtxSetCurrent) \
  X(cuCtxGetCurrent) \
  X(cuPointerGetAttributes) \
  X(cuMemGetAddressRange_v2) \
  X(cuMemHostAlloc) \
  X(cuMemFreeHost) \
  X(cuStreamCreate) \
  X(cuStreamDestroy_v2) \
  X(cuStreamSynchronize) \
  X(cuStreamWaitEvent) \
  X(cuEventCreate) \
  X(cuEventDestroy_v2) \
  X(cuEventRecord) \
  X(cuEventQuery) \
  X(cuEventSynchronize) \
  X(cuMemcpyDtoHAsync_v2) \
  X(cuMemcpyHtoDAsync_v2) \
  X(cuMemcpy2DAsync_v2) \
  X(cuLaunchHostFunc) \
  X(cuMemAlloc_v2) \
  X(cuMemAllocManaged) \
  X(cuMemFree_v2) \
  X(cuMemcpyHtoD_v2) \
  X(cuMemcpyDtoH_v2)
  // clang-format on
  PDKV_FAKE_FNS(PDKV_FAKE_FN)
  int (*pdkvFakeContextCreated)(int) = nullptr;
  void (*pdkvFakeSetCopyDelayUs)(unsigned) = nullptr;
  void (*pdkvFakeSetPoison)(int) = nullptr;
  void (*pdkvFakeFailCopyAfter)(long) = nullptr;
  long (*pdkvFakeCopyCount)() = nullptr;
  void (*pdkvFakeSetMaxPitch)(size_t) = nullptr;
  void (*pdkvFakeSetPageableDelayUs)(unsigned) = nullptr;
  long (*pdkvFakeSpinWaits)() = nullptr;
  long (*pdkvFakeBlockingWaits)() = nullptr;
  CUresult (*pdkvFakeStickyError)(int) = nullptr;
  void (*pdkvFakeClearStickyError)(int) = nullptr;
};

template <typename T>
void resolve(void* handle, const char* name, T* fn) {
  *fn = reinterpret_cast<T>(dlsym(handle, name));
  if (*fn == nullptr) {
    std::fprintf(stderr, "fake_cuda_test: %s missing from %s\n", name, PDKV_FAKE_CUDA_PATH);
    std::abort();
  }
}

// Loaded once per process (never closed: the driver is not either).
const Fake& fake() {
  static const Fake* loaded = [] {
    auto* f = new Fake();
    f->handle = dlopen(PDKV_FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
    if (f->handle == nullptr) {
      std::fprintf(stderr, "fake_cuda_test: %s\n", dlerror());
      std::abort();
    }
#define PDKV_FAKE_RESOLVE(name) resolve(f->handle, #name, &f->name);
    PDKV_FAKE_FNS(PDKV_FAKE_RESOLVE)
    PDKV_FAKE_RESOLVE(pdkvFakeContextCreated)
    PDKV_FAKE_RESOLVE(pdkvFakeSetCopyDelayUs)
    PDKV_FAKE_RESOLVE(pdkvFakeSetPoison)
    PDKV_FAKE_RESOLVE(pdkvFakeFailCopyAfter)
    PDKV_FAKE_RESOLVE(pdkvFakeCopyCount)
    PDKV_FAKE_RESOLVE(pdkvFakeSetMaxPitch)
    PDKV_FAKE_RESOLVE(pdkvFakeSetPageableDelayUs)
    PDKV_FAKE_RESOLVE(pdkvFakeSpinWaits)
    PDKV_FAKE_RESOLVE(pdkvFakeBlockingWaits)
    PDKV_FAKE_RESOLVE(pdkvFakeStickyError)
    PDKV_FAKE_RESOLVE(pdkvFakeClearStickyError)
    int count = 0;
    f->count_before_init = f->cuDeviceGetCount(&count);
    if (f->cuInit(0) != CUDA_SUCCESS) std::abort();
    return f;
  }();
  return *loaded;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

// A host function that holds its stream until the test opens it: lets a test look at
// memory before a copy queued behind it can run, with no race.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  static void wait(void* self) {
    auto* g = static_cast<Gate*>(self);
    std::unique_lock<std::mutex> lock(g->mu);
    g->cv.wait(lock, [g] { return g->open; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

// Every test runs on device 0's primary context; device 1 is never retained, so that
// pdkvFakeContextCreated(1) stays 0.
class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    f_ = &fake();
    f_->pdkvFakeSetCopyDelayUs(0);
    f_->pdkvFakeSetPoison(0);
    f_->pdkvFakeFailCopyAfter(-1);
    ASSERT_EQ(f_->cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(f_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }
  void TearDown() override {
    f_->pdkvFakeSetCopyDelayUs(0);
    f_->pdkvFakeSetPoison(0);
    f_->pdkvFakeFailCopyAfter(-1);
    f_->pdkvFakeSetMaxPitch(0);
    f_->pdkvFakeSetPageableDelayUs(1000);
    // Only the fake's own tests may do this: a real context stays failed.
    f_->pdkvFakeClearStickyError(0);
    f_->cuCtxSetCurrent(nullptr);
    f_->cuDevicePrimaryCtxRelease_v2(0);
  }

  CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(f_->cuMemAlloc_v2(&p, bytes), CUDA_SUCCESS);
    return p;
  }
  uint8_t* alloc_host(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(f_->cuMemHostAlloc(&p, bytes, 0), CUDA_SUCCESS);
    return static_cast<uint8_t*>(p);
  }
  CUstream stream() {
    CUstream s = nullptr;
    EXPECT_EQ(f_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    return s;
  }
  CUevent event() {
    CUevent e = nullptr;
    EXPECT_EQ(f_->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    return e;
  }
  // A synchronous upload that has landed on return (the driver's, from pageable memory,
  // has not: it needs the context synchronised).
  void upload(CUdeviceptr dev, const void* src, size_t bytes) {
    ASSERT_EQ(f_->cuMemcpyHtoD_v2(dev, src, bytes), CUDA_SUCCESS);
    ASSERT_EQ(f_->cuCtxSynchronize(), CUDA_SUCCESS);
  }
  std::vector<uint8_t> read_back(CUdeviceptr p, size_t bytes) {
    std::vector<uint8_t> v(bytes);
    EXPECT_EQ(f_->cuMemcpyDtoH_v2(v.data(), p, bytes), CUDA_SUCCESS);
    return v;
  }

  const Fake* f_ = nullptr;
  CUcontext ctx_ = nullptr;
};

// The permissions /proc/self/maps gives the mapping holding addr ("---s" etc.).
std::string permissions_of(uintptr_t addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::string perms;
    in >> std::hex >> lo >> dash >> hi >> perms;
    if (addr >= lo && addr < hi) return perms;
  }
  return "";
}

TEST_F(FakeCudaTest, DevicesAndInitialisation) {
  EXPECT_EQ(f_->count_before_init, CUDA_ERROR_NOT_INITIALIZED);
  int count = 0;
  ASSERT_EQ(f_->cuDeviceGetCount(&count), CUDA_SUCCESS);
  if (std::getenv("PDKV_FAKE_CUDA_DEVICES") == nullptr) {
    EXPECT_EQ(count, 2);
  }
  CUdevice dev = -1;
  EXPECT_EQ(f_->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(f_->cuDeviceGet(&dev, count), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(f_->cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  CUcontext current = nullptr;
  EXPECT_EQ(f_->cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx_);
}

// The name is the enumerator, the string a description, as with the driver: a message
// that shows one of them only is caught by the other differing.
TEST_F(FakeCudaTest, ErrorNamesAndDescriptionsDiffer) {
  const char* name = nullptr;
  const char* text = nullptr;
  EXPECT_EQ(f_->cuGetErrorName(CUDA_ERROR_NOT_READY, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_NOT_READY");
  EXPECT_EQ(f_->cuGetErrorString(CUDA_ERROR_NOT_READY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "device not ready");
  EXPECT_EQ(f_->cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_EQ(f_->cuGetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "an illegal memory access was encountered");
  // Unknown: an error, and the pointer left as it was.
  text = name = "untouched";
  EXPECT_EQ(f_->cuGetErrorString(12345, &text), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(f_->cuGetErrorName(12345, &name), CUDA_ERROR_INVALID_VALUE);
  EXPECT_STREQ(text, "untouched");
  EXPECT_STREQ(name, "untouched");
}

TEST_F(FakeCudaTest, ContextCreatedOnlyOnTheRetainedDevice) {
  EXPECT_EQ(f_->pdkvFakeContextCreated(0), 1);
  EXPECT_EQ(f_->pdkvFakeContextCreated(1), 0);
  EXPECT_EQ(f_->pdkvFakeContextCreated(99), 0);
}

TEST_F(FakeCudaTest, DeviceMemoryIsNotCpuAccessible) {
  CUdeviceptr p = alloc(8192);
  std::string perms = permissions_of(static_cast<uintptr_t>(p));
  ASSERT_EQ(perms.substr(0, 3), "---") << perms;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        volatile uint8_t byte = *reinterpret_cast<volatile uint8_t*>(p + 100);
        (void)byte;
      },
      "");
  EXPECT_EQ(f_->cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, SocketsOnDeviceMemoryFailWithEfault) {
  CUdeviceptr p = alloc(4096);
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  errno = 0;
  EXPECT_EQ(send(fds[0], reinterpret_cast<void*>(p), 4096, MSG_DONTWAIT | MSG_NOSIGNAL), -1);
  EXPECT_EQ(errno, EFAULT);
  char bytes[64] = {1, 2, 3};
  ASSERT_EQ(send(fds[0], bytes, sizeof(bytes), 0), static_cast<ssize_t>(sizeof(bytes)));
  errno = 0;
  EXPECT_EQ(recv(fds[1], reinterpret_cast<void*>(p), sizeof(bytes), MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EFAULT);
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(f_->cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, SynchronousAndAsyncRoundTrips) {
  const size_t n = 3 * 4096 + 123;
  std::vector<uint8_t> data = pattern(n, 1);
  CUdeviceptr a = alloc(n);
  CUdeviceptr b = alloc(n);
  ASSERT_EQ(f_->cuMemcpyHtoD_v2(a, data.data(), n), CUDA_SUCCESS);
  EXPECT_EQ(read_back(a, n), data);

  uint8_t* src = alloc_host(n);
  uint8_t* dst = alloc_host(n);
  std::vector<uint8_t> other = pattern(n, 9);
  std::memcpy(src, other.data(), n);
  CUstream s = stream();
  CUevent e = event();
  long copies = f_->pdkvFakeCopyCount();
  ASSERT_EQ(f_->cuMemcpyHtoDAsync_v2(b, src, n, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuMemcpyDtoHAsync_v2(dst, b, n, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuEventRecord(e, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(dst, other.data(), n), 0);
  EXPECT_EQ(f_->pdkvFakeCopyCount() - copies, 2);

  EXPECT_EQ(f_->cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFreeHost(src), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFreeHost(dst), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFree_v2(b), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, StridedTwoDimensionalCopies) {
  // Host: 6 rows of pitch 100; device: rows of pitch 48. Copy a 5 x 30 block from host
  // (x 7, y 1) to device (x 10, y 2), then back with UNIFIED types to another host block.
  const size_t hpitch = 100, dpitch = 48, width = 30, height = 5;
  std::vector<uint8_t> host = pattern(hpitch * 6, 3);
  CUdeviceptr dev = alloc(dpitch * 8);
  std::vector<uint8_t> zeros(dpitch * 8, 0);
  upload(dev, zeros.data(), zeros.size());
  CUstream s = stream();
  long copies = f_->pdkvFakeCopyCount();

  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = host.data();
  up.srcXInBytes = 7;
  up.srcY = 1;
  up.srcPitch = hpitch;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = dev;
  up.dstXInBytes = 10;
  up.dstY = 2;
  up.dstPitch = dpitch;
  up.WidthInBytes = width;
  up.Height = height;
  ASSERT_EQ(f_->cuMemcpy2DAsync_v2(&up, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(f_->pdkvFakeCopyCount() - copies, 1);  // one driver call for 5 rows

  std::vector<uint8_t> expected(dpitch * 8, 0);
  for (size_t r = 0; r < height; ++r) {
    std::memcpy(&expected[(2 + r) * dpitch + 10], &host[(1 + r) * hpitch + 7], width);
  }
  EXPECT_EQ(read_back(dev, dpitch * 8), expected);

  std::vector<uint8_t> back(width * height, 0);
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  down.srcDevice = dev;
  down.srcXInBytes = 10;
  down.srcY = 2;
  down.srcPitch = dpitch;
  down.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  down.dstDevice = reinterpret_cast<CUdeviceptr>(back.data());
  down.dstPitch = width;
  down.WidthInBytes = width;
  down.Height = height;
  ASSERT_EQ(f_->cuMemcpy2DAsync_v2(&down, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuStreamSynchronize(s), CUDA_SUCCESS);
  for (size_t r = 0; r < height; ++r) {
    EXPECT_EQ(std::memcmp(&back[r * width], &host[(1 + r) * hpitch + 7], width), 0) << r;
  }
  // A pitch smaller than the width is refused at once.
  down.dstPitch = width - 1;
  EXPECT_EQ(f_->cuMemcpy2DAsync_v2(&down, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(f_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFree_v2(dev), CUDA_SUCCESS);
}

struct Log {
  std::mutex mu;
  std::vector<int> order;
  const uint8_t* watched = nullptr;
  std::vector<uint8_t> seen;
};

TEST_F(FakeCudaTest, OperationsOnAStreamRunInOrder) {
  f_->pdkvFakeSetCopyDelayUs(2000);
  CUdeviceptr dev = alloc(256);
  uint8_t* host = alloc_host(256 * 4);
  uint8_t* out = alloc_host(256);
  CUstream s = stream();
  Log log;
  log.watched = out;
  // Each copy overwrites the same bytes; the last one enqueued must win, and a host
  // function queued after the read-back must see its result.
  for (int i = 0; i < 4; ++i) {
    std::memset(host + 256 * i, i + 1, 256);
    ASSERT_EQ(f_->cuMemcpyHtoDAsync_v2(dev, host + 256 * i, 256, s), CUDA_SUCCESS);
  }
  ASSERT_EQ(f_->cuMemcpyDtoHAsync_v2(out, dev, 256, s), CUDA_SUCCESS);
  auto note = [](void* p) {
    auto* l = static_cast<Log*>(p);
    std::lock_guard<std::mutex> lock(l->mu);
    l->order.push_back(static_cast<int>(l->order.size()));
    l->seen.assign(l->watched, l->watched + 256);
  };
  ASSERT_EQ(f_->cuLaunchHostFunc(s, note, &log), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuStreamSynchronize(s), CUDA_SUCCESS);
  std::lock_guard<std::mutex> lock(log.mu);
  ASSERT_EQ(log.order.size(), 1u);
  EXPECT_EQ(log.seen, std::vector<uint8_t>(256, 4));
  EXPECT_EQ(f_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFreeHost(host), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFreeHost(out), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFree_v2(dev), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, EventQueryAndDelay) {
  CUevent never = event();
  EXPECT_EQ(f_->cuEventQuery(never), CUDA_SUCCESS);  // never recorded
  EXPECT_EQ(f_->cuEventSynchronize(never), CUDA_SUCCESS);
  f_->pdkvFakeSetCopyDelayUs(200000);
  CUdeviceptr dev = alloc(64);
  uint8_t* host = alloc_host(64);
  CUstream s = stream();
  CUevent e = event();
  ASSERT_EQ(f_->cuMemcpyHtoDAsync_v2(dev, host, 64, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuEventQuery(e), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(f_->cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuEventDestroy_v2(never), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFreeHost(host), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemFree_v2(dev), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, CrossStreamWaitEvent) {
  const size_t n = 4096;
  std::vector<uint8_t> data = pattern(n, 5);
  CUdeviceptr dev = alloc(n);
  uint8_t* src = alloc_host(n);
  uint8_t* dst = alloc_host(n);
  std::memcpy(src, data.data(), n);
  CUstream producer = stream();
  CUstream consumer = stream();
  CUevent written = event();
  CUevent read = event();
  Gate gate;  // holds the producer until the consumer's work is all queued
  ASSERT_EQ(f_->cuLaunchHostFunc(producer, Gate::wait, &gate), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuMemcpyHtoDAsync_v2(dev, src, n, producer), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuEventRecord(written, producer), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuStreamWaitEvent(consumer, written, 0), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuMemcpyDtoHAsync_v2(dst, dev, n, consumer), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuEventRecord(read, consumer), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuEventQuery(read), CUDA_ERROR_NOT_READY);  // blocked behind the producer
  gate.release();
  ASSERT_EQ(f_->cuEventSynchronize(read), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(dst, data.data(), n), 0);
  f_->cuEventDestroy_v2(written);
  f_->cuEventDestroy_v2(read);
  f_->cuStreamDestroy_v2(producer);
  f_->cuStreamDestroy_v2(consumer);
  f_->cuMemFreeHost(src);
  f_->cuMemFreeHost(dst);
  f_->cuMemFree_v2(dev);
}

TEST_F(FakeCudaTest, PoisonFillsAHostDestinationUntilTheCopyRuns) {
  const size_t n = 2048;
  std::vector<uint8_t> data = pattern(n, 11);
  CUdeviceptr dev = alloc(n);
  upload(dev, data.data(), n);
  uint8_t* pinned = alloc_host(n);
  std::memset(pinned, 0, n);
  f_->pdkvFakeSetPoison(1);
  f_->pdkvFakeSetCopyDelayUs(1000);
  CUstream s = stream();
  CUevent e = event();
  Gate gate;  // the copy cannot run before the test has looked at the destination
  ASSERT_EQ(f_->cuLaunchHostFunc(s, Gate::wait, &gate), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuMemcpyDtoHAsync_v2(pinned, dev, n, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(std::vector<uint8_t>(pinned, pinned + n), std::vector<uint8_t>(n, 0xA5));
  gate.release();
  ASSERT_EQ(f_->cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(pinned, data.data(), n), 0);
  f_->cuEventDestroy_v2(e);
  f_->cuStreamDestroy_v2(s);
  f_->cuMemFreeHost(pinned);
  f_->cuMemFree_v2(dev);
}

void count_call(void* counter) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  ++*static_cast<int*>(counter);
}

// An illegal address is fatal to the whole context, as the reference says: "any further
// CUDA work will return the same error". Other streams, the synchronous copies and new
// allocations all fail from then on; destroying what exists still frees it.
TEST_F(FakeCudaTest, InjectedFailureFailsTheWholeContext) {
  const size_t n = 512;
  CUdeviceptr dev = alloc(4 * n);
  std::vector<uint8_t> zeros(4 * n, 0);
  upload(dev, zeros.data(), zeros.size());
  uint8_t* host = alloc_host(n);
  std::memset(host, 0x3C, n);
  CUstream bad = stream();
  CUstream other = stream();
  CUevent bad_done = event();
  CUevent other_done = event();
  int calls = 0;
  // The other stream is held by a gate until the fault happened, so its copy comes after.
  Gate gate;
  ASSERT_EQ(f_->cuLaunchHostFunc(other, Gate::wait, &gate), CUDA_SUCCESS);
  f_->pdkvFakeFailCopyAfter(2);
  ASSERT_EQ(f_->cuMemcpyHtoDAsync_v2(dev, host, n, bad), CUDA_SUCCESS);            // 1: runs
  ASSERT_EQ(f_->cuMemcpyHtoDAsync_v2(dev + n, host, n, bad), CUDA_SUCCESS);        // 2: fails
  ASSERT_EQ(f_->cuMemcpyHtoDAsync_v2(dev + 2 * n, host, n, other), CUDA_SUCCESS);  // skipped
  ASSERT_EQ(f_->cuLaunchHostFunc(bad, count_call, &calls), CUDA_SUCCESS);          // skipped
  ASSERT_EQ(f_->cuEventRecord(bad_done, bad), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuEventSynchronize(bad_done), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->pdkvFakeStickyError(0), CUDA_ERROR_ILLEGAL_ADDRESS);
  gate.release();
  // Every call that needs the context now fails with the same error, whatever it names.
  CUdeviceptr more = 0;
  CUstream fresh = nullptr;
  std::vector<uint8_t> back(4 * n, 0xFF);
  EXPECT_EQ(f_->cuStreamSynchronize(other), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuEventRecord(other_done, other), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuMemAlloc_v2(&more, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuStreamCreate(&fresh, CU_STREAM_NON_BLOCKING), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuMemcpyDtoH_v2(back.data(), dev, 4 * n), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuMemcpyHtoDAsync_v2(dev, host, n, other), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(calls, 0);
  // Another thread bound to the same context sees it too.
  CUresult elsewhere = CUDA_SUCCESS;
  std::thread([&] {
    f_->cuCtxSetCurrent(ctx_);
    CUdeviceptr p = 0;
    elsewhere = f_->cuMemAlloc_v2(&p, 64);
  }).join();
  EXPECT_EQ(elsewhere, CUDA_ERROR_ILLEGAL_ADDRESS);
  // Destroying still frees, and reports the error.
  EXPECT_EQ(f_->cuEventDestroy_v2(bad_done), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuEventDestroy_v2(other_done), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuStreamDestroy_v2(bad), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuStreamDestroy_v2(other), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuMemFreeHost(host), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->cuMemFree_v2(dev), CUDA_ERROR_ILLEGAL_ADDRESS);
  // What landed before the fault did; nothing after it.
  f_->pdkvFakeClearStickyError(0);
}

// An asynchronous copy out of its allocation faults the context; a synchronous one is
// checked before it runs and refused as an invalid value.
TEST_F(FakeCudaTest, CopyOutsideOneAllocationIsAnIllegalAddress) {
  CUdeviceptr dev = alloc(1000);
  std::vector<uint8_t> host(64, 1);
  EXPECT_EQ(f_->cuMemcpyHtoD_v2(dev + 990, host.data(), 20), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(f_->cuMemcpyHtoD_v2(dev + 990, host.data(), 10), CUDA_SUCCESS);
  CUstream s = stream();
  ASSERT_EQ(f_->cuMemcpyHtoDAsync_v2(dev + 990, host.data(), 20, s), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(f_->pdkvFakeStickyError(0), CUDA_ERROR_ILLEGAL_ADDRESS);
  f_->cuStreamDestroy_v2(s);
  f_->cuMemFree_v2(dev);
}

// A synchronous upload from pageable memory returns once its source is staged; the bytes
// land later. The caller may reuse its buffer at once; a reader on a non-blocking stream
// that does not synchronise reads the old bytes; cuCtxSynchronize (or the next
// synchronous copy, in the legacy stream's order) waits for it.
TEST_F(FakeCudaTest, PageableUploadLandsAfterItReturns) {
  const size_t n = 4096;
  CUdeviceptr dev = alloc(n);
  const std::vector<uint8_t> old(n, 0x11);
  upload(dev, old.data(), n);
  f_->pdkvFakeSetPageableDelayUs(200000);
  std::vector<uint8_t> fresh = pattern(n, 5);
  const std::vector<uint8_t> expected = fresh;
  ASSERT_EQ(f_->cuMemcpyHtoD_v2(dev, fresh.data(), n), CUDA_SUCCESS);
  std::fill(fresh.begin(), fresh.end(), 0);  // staged: reusing the source changes nothing
  uint8_t* pinned = alloc_host(n);
  CUstream s = stream();
  ASSERT_EQ(f_->cuMemcpyDtoHAsync_v2(pinned, dev, n, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(std::vector<uint8_t>(pinned, pinned + n), old) << "the upload landed at once";
  ASSERT_EQ(f_->cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuMemcpyDtoHAsync_v2(pinned, dev, n, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(std::vector<uint8_t>(pinned, pinned + n), expected);
  // A synchronous download is ordered after the upload without any explicit sync.
  const std::vector<uint8_t> third(n, 0x33);
  ASSERT_EQ(f_->cuMemcpyHtoD_v2(dev, third.data(), n), CUDA_SUCCESS);
  EXPECT_EQ(read_back(dev, n), third);
  // From pinned memory the upload is synchronous.
  f_->pdkvFakeSetPageableDelayUs(10000000);
  std::memset(pinned, 0x44, n);
  ASSERT_EQ(f_->cuMemcpyHtoD_v2(dev, pinned, n), CUDA_SUCCESS);
  EXPECT_EQ(read_back(dev, n), std::vector<uint8_t>(n, 0x44));
  f_->cuStreamDestroy_v2(s);
  f_->cuMemFreeHost(pinned);
  f_->cuMemFree_v2(dev);
}

// Waiting on an event made without CU_EVENT_BLOCKING_SYNC polls a core for the whole
// wait; with it the thread sleeps. The fake counts each kind of wait.
TEST_F(FakeCudaTest, OnlyBlockingSyncEventsSleepThroughAWait) {
  const size_t n = 4096;
  CUdeviceptr dev = alloc(n);
  uint8_t* pinned = alloc_host(n);
  CUstream s = stream();
  auto wait_cpu_ms = [&](unsigned flags, long* spins, long* sleeps) {
    CUevent e = nullptr;
    EXPECT_EQ(f_->cuEventCreate(&e, flags), CUDA_SUCCESS);
    Gate gate;
    EXPECT_EQ(f_->cuLaunchHostFunc(s, Gate::wait, &gate), CUDA_SUCCESS);
    EXPECT_EQ(f_->cuMemcpyDtoHAsync_v2(pinned, dev, n, s), CUDA_SUCCESS);
    EXPECT_EQ(f_->cuEventRecord(e, s), CUDA_SUCCESS);
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.release();
    });
    const long spin0 = f_->pdkvFakeSpinWaits(), sleep0 = f_->pdkvFakeBlockingWaits();
    timespec a{}, b{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    EXPECT_EQ(f_->cuEventSynchronize(e), CUDA_SUCCESS);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    opener.join();
    *spins = f_->pdkvFakeSpinWaits() - spin0;
    *sleeps = f_->pdkvFakeBlockingWaits() - sleep0;
    f_->cuEventDestroy_v2(e);
    return (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  };
  long spins = 0, sleeps = 0;
  const double spinning = wait_cpu_ms(CU_EVENT_DISABLE_TIMING, &spins, &sleeps);
  EXPECT_EQ(spins, 1);
  EXPECT_EQ(sleeps, 0);
  const double sleeping =
      wait_cpu_ms(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING, &spins, &sleeps);
  EXPECT_EQ(spins, 0);
  EXPECT_EQ(sleeps, 1);
  // The CPU each wait cost is printed, not asserted (pdkv bench engine --memory device
  // measures it): a machine's load decides how much a spinning thread gets.
  std::printf("100 ms wait: %.1f ms CPU spinning, %.1f ms sleeping\n", spinning, sleeping);
  f_->cuStreamDestroy_v2(s);
  f_->cuMemFreeHost(pinned);
  f_->cuMemFree_v2(dev);
}

// CU_DEVICE_ATTRIBUTE_MAX_PITCH: a 2-D copy with a larger pitch is refused.
TEST_F(FakeCudaTest, TwoDimensionalCopiesAboveTheMaxPitchAreRefused) {
  int pitch = 0;
  ASSERT_EQ(f_->cuDeviceGetAttribute(&pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, 0), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 2147483647);
  f_->pdkvFakeSetMaxPitch(4096);
  ASSERT_EQ(f_->cuDeviceGetAttribute(&pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, 0), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 4096);
  EXPECT_EQ(f_->cuDeviceGetAttribute(&pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, 99),
            CUDA_ERROR_INVALID_DEVICE);
  CUdeviceptr dev = alloc(64 * 1024);
  std::vector<uint8_t> host(64 * 1024, 7);
  CUstream s = stream();
  auto copy = [&](size_t dst_pitch) {
    CUDA_MEMCPY2D c{};
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = host.data();
    c.srcPitch = 256;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dev;
    c.dstPitch = dst_pitch;
    c.WidthInBytes = 256;
    c.Height = 4;
    return f_->cuMemcpy2DAsync_v2(&c, s);
  };
  EXPECT_EQ(copy(4096), CUDA_SUCCESS);
  EXPECT_EQ(copy(8192), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(f_->cuStreamSynchronize(s), CUDA_SUCCESS);  // a refused call faults nothing
  f_->cuStreamDestroy_v2(s);
  f_->cuMemFree_v2(dev);
}

// Memory mapped piece by piece into one reserved range (PyTorch's expandable segments):
// each piece is its own range for cuMemGetAddressRange; a copy may run across
// neighbouring pieces; memory is inaccessible until cuMemSetAccess; unmapped addresses
// are no device memory any more.
TEST_F(FakeCudaTest, MappedPiecesOfOneReservation) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  size_t granule = 0;
  ASSERT_EQ(f_->cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  ASSERT_GT(granule, 0u);
  const size_t size = 3 * granule;
  CUdeviceptr base = 0;
  ASSERT_EQ(f_->cuMemAddressReserve(&base, size, 0, 0, 0), CUDA_SUCCESS);
  for (size_t i = 0; i < 3; ++i) {
    CUmemGenericAllocationHandle h = 0;
    ASSERT_EQ(f_->cuMemCreate(&h, granule, &prop, 0), CUDA_SUCCESS);
    ASSERT_EQ(f_->cuMemMap(base + i * granule, granule, 0, h, 0), CUDA_SUCCESS);
    EXPECT_EQ(f_->cuMemMap(base + i * granule, granule, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(f_->cuMemRelease(h), CUDA_SUCCESS);  // the mapping keeps the memory
  }
  CUdeviceptr piece = 0;
  size_t piece_size = 0;
  ASSERT_EQ(f_->cuMemGetAddressRange_v2(&piece, &piece_size, base + granule + 5), CUDA_SUCCESS);
  EXPECT_EQ(piece, base + granule);
  EXPECT_EQ(piece_size, granule);
  EXPECT_EQ(permissions_of(static_cast<uintptr_t>(base + granule)).substr(0, 3), "---");
  // Not accessible before cuMemSetAccess.
  std::vector<uint8_t> data = pattern(2 * granule, 9);
  CUstream s = stream();
  EXPECT_EQ(f_->cuMemcpyHtoD_v2(base, data.data(), 64), CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc rw{};
  rw.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(f_->cuMemSetAccess(base, size, &rw, 1), CUDA_SUCCESS);
  // Across the edge of pieces 0 and 1, and 1 and 2, asynchronously.
  uint8_t* pinned = alloc_host(2 * granule);
  std::memcpy(pinned, data.data(), 2 * granule);
  ASSERT_EQ(f_->cuMemcpyHtoDAsync_v2(base + granule / 2, pinned, 2 * granule, s), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(read_back(base + granule / 2, 2 * granule), data);
  // Unmapping the middle piece leaves a hole no copy may cross.
  ASSERT_EQ(f_->cuMemUnmap(base + granule, granule), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemGetAddressRange_v2(&piece, &piece_size, base + granule), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(f_->cuMemcpyHtoD_v2(base + granule / 2, data.data(), granule),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(f_->cuMemAddressFree(base, size), CUDA_ERROR_INVALID_VALUE);  // still mapped
  ASSERT_EQ(f_->cuMemUnmap(base, granule), CUDA_SUCCESS);
  ASSERT_EQ(f_->cuMemUnmap(base + 2 * granule, granule), CUDA_SUCCESS);
  EXPECT_EQ(f_->cuMemAddressFree(base, size), CUDA_SUCCESS);
  f_->cuStreamDestroy_v2(s);
  f_->cuMemFreeHost(pinned);
}

TEST_F(FakeCudaTest, ThreadWithoutAContextGetsInvalidContext) {
  CUstream s = stream();
  CUevent e = event();
  CUdeviceptr dev = alloc(64);
  std::vector<CUresult> results;
  std::thread([&] {
    CUdeviceptr p = 0;
    void* h = nullptr;
    CUstream s2 = nullptr;
    CUevent e2 = nullptr;
    char buf[64] = {};
    CUcontext current = reinterpret_cast<CUcontext>(1);
    f_->cuCtxGetCurrent(&current);
    results.push_back(current == nullptr ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS);
    results.push_back(f_->cuMemAlloc_v2(&p, 64));
    results.push_back(f_->cuMemAllocManaged(&p, 64, CU_MEM_ATTACH_GLOBAL));
    results.push_back(f_->cuMemHostAlloc(&h, 64, 0));
    results.push_back(f_->cuStreamCreate(&s2, 0));
    results.push_back(f_->cuEventCreate(&e2, 0));
    results.push_back(f_->cuMemcpyHtoDAsync_v2(dev, buf, 64, s));
    results.push_back(f_->cuMemcpyDtoHAsync_v2(buf, dev, 64, s));
    results.push_back(f_->cuMemcpyHtoD_v2(dev, buf, 64));
    results.push_back(f_->cuEventRecord(e, s));
    results.push_back(f_->cuStreamSynchronize(s));
    results.push_back(f_->cuEventQuery(e));
    results.push_back(f_->cuMemFree_v2(dev));
  }).join();
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i], CUDA_ERROR_INVALID_CONTEXT) << "call " << i;
  }
  // The same thread, once bound, succeeds.
  std::thread([&] {
    char buf[64] = {};
    results.assign(1, f_->cuCtxSetCurrent(ctx_));
    results.push_back(f_->cuMemcpyHtoDAsync_v2(dev, buf, 64, s));
    results.push_back(f_->cuStreamSynchronize(s));
  }).join();
  for (CUresult r : results) EXPECT_EQ(r, CUDA_SUCCESS);
  f_->cuEventDestroy_v2(e);
  f_->cuStreamDestroy_v2(s);
  f_->cuMemFree_v2(dev);
}

TEST_F(FakeCudaTest, PointerAttributes) {
  CUdeviceptr dev = alloc(10000);
  CUdeviceptr managed = 0;
  ASSERT_EQ(f_->cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  uint8_t* pinned = alloc_host(4096);
  int on_stack = 0;
  struct Expect {
    CUdeviceptr ptr;
    unsigned type;
    int managed;
    int ordinal;
    CUcontext ctx;
  };
  const Expect cases[] = {
      {dev, CU_MEMORYTYPE_DEVICE, 0, 0, ctx_},
      {dev + 9999, CU_MEMORYTYPE_DEVICE, 0, 0, ctx_},  // inside, not the base
      {managed + 17, CU_MEMORYTYPE_DEVICE, 1, 0, ctx_},
      {reinterpret_cast<CUdeviceptr>(pinned + 5), CU_MEMORYTYPE_HOST, 0, -1, ctx_},
      {reinterpret_cast<CUdeviceptr>(&on_stack), 0, 0, -1, nullptr},
      {dev + 10000, 0, 0, -1, nullptr},  // one past the end
  };
  for (const Expect& c : cases) {
    unsigned type = 99;
    int is_managed = 99, ordinal = 99;
    CUcontext ctx = reinterpret_cast<CUcontext>(1);
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_CONTEXT};
    void* data[] = {&type, &is_managed, &ordinal, &ctx};
    ASSERT_EQ(f_->cuPointerGetAttributes(4, attrs, data, c.ptr), CUDA_SUCCESS);
    EXPECT_EQ(type, c.type) << std::hex << c.ptr;
    EXPECT_EQ(is_managed, c.managed) << std::hex << c.ptr;
    EXPECT_EQ(ordinal, c.ordinal) << std::hex << c.ptr;
    EXPECT_EQ(ctx, c.ctx) << std::hex << c.ptr;
  }
  f_->cuMemFreeHost(pinned);
  f_->cuMemFree_v2(managed);
  f_->cuMemFree_v2(dev);
}

TEST_F(FakeCudaTest, AddressRanges) {
  const size_t size = 5000;
  CUdeviceptr a = alloc(size);
  CUdeviceptr b = alloc(size);
  CUdeviceptr base = 0;
  size_t got = 0;
  ASSERT_EQ(f_->cuMemGetAddressRange_v2(&base, &got, a + 4321), CUDA_SUCCESS);
  EXPECT_EQ(base, a);
  EXPECT_EQ(got, size);
  EXPECT_EQ(f_->cuMemGetAddressRange_v2(&base, &got, a + size), CUDA_ERROR_NOT_FOUND);
  int on_stack = 0;
  EXPECT_EQ(f_->cuMemGetAddressRange_v2(&base, &got, reinterpret_cast<CUdeviceptr>(&on_stack)),
            CUDA_ERROR_NOT_FOUND);
  // Not adjacent: at least a guard page (unowned, PROT_NONE) lies between the two.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (size + page - 1) / page * page;
  CUdeviceptr lo = a < b ? a : b, hi = a < b ? b : a;
  EXPECT_GE(hi - lo, rounded + page);
  EXPECT_EQ(f_->cuMemGetAddressRange_v2(&base, &got, lo + rounded), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(permissions_of(static_cast<uintptr_t>(lo + rounded)).substr(0, 3), "---");
  f_->cuMemFree_v2(a);
  f_->cuMemFree_v2(b);
  EXPECT_EQ(f_->cuMemGetAddressRange_v2(&base, &got, a), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(f_->cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);  // double free
}

// The modes are read from the environment at the first cuInit, so this runs in a fresh
// process (a threadsafe-style death test re-executes the binary for this test alone).
TEST(FakeCudaEnvironmentTest, ModesComeFromTheEnvironmentAtInit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("PDKV_FAKE_CUDA_DEVICES", "3", 1);
        setenv("PDKV_FAKE_CUDA_DELAY_US", "50000", 1);
        setenv("PDKV_FAKE_CUDA_POISON", "1", 1);
        setenv("PDKV_FAKE_CUDA_FAIL_COPY_AFTER", "2", 1);
        const Fake& f = fake();
        bool ok = true;
        auto check = [&ok](bool cond, const char* what) {
          if (!cond) std::fprintf(stderr, "failed: %s\n", what);
          ok = ok && cond;
        };
        int count = 0;
        CUcontext ctx = nullptr;
        CUdeviceptr dev = 0;
        void* host = nullptr;
        CUstream s = nullptr;
        check(f.cuDeviceGetCount(&count) == CUDA_SUCCESS && count == 3, "3 devices");
        check(f.cuDevicePrimaryCtxRetain(&ctx, 2) == CUDA_SUCCESS, "retain device 2");
        check(f.cuCtxSetCurrent(ctx) == CUDA_SUCCESS, "set current");
        check(f.cuMemAlloc_v2(&dev, 256) == CUDA_SUCCESS, "alloc");
        check(f.cuMemHostAlloc(&host, 256, 0) == CUDA_SUCCESS, "host alloc");
        check(f.cuStreamCreate(&s, 0) == CUDA_SUCCESS, "stream");
        auto start = std::chrono::steady_clock::now();
        check(f.cuMemcpyHtoDAsync_v2(dev, host, 256, s) == CUDA_SUCCESS, "copy 1");
        check(f.cuStreamSynchronize(s) == CUDA_SUCCESS, "copy 1 runs");
        check(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(50), "delay");
        check(f.cuMemcpyHtoDAsync_v2(dev, host, 256, s) == CUDA_SUCCESS, "copy 2");
        check(f.cuMemcpyDtoHAsync_v2(host, dev, 256, s) == CUDA_SUCCESS, "copy 3");
        check(f.cuStreamSynchronize(s) == CUDA_ERROR_ILLEGAL_ADDRESS, "copy 2 fails");
        // Copy 3 never ran (the stream had failed), so the poison it got at enqueue stays.
        auto* bytes = static_cast<uint8_t*>(host);
        check(bytes[0] == 0xA5 && bytes[255] == 0xA5, "poisoned");
        check(f.pdkvFakeContextCreated(2) == 1 && f.pdkvFakeContextCreated(0) == 0, "contexts");
        f.cuStreamDestroy_v2(s);
        f.cuMemFreeHost(host);
        f.cuMemFree_v2(dev);
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
