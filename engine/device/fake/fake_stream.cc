#include "engine/device/fake/fake_stream.h"

#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include "engine/device/fake/fake_memory.h"
#include "engine/device/fake/fake_state.h"

namespace pdkv::fake_cuda {
namespace {

// CondVar has no unbounded wait (common/mutex.h); a driver wait has no deadline, so wait
// in long slices until pred holds. Each slice sleeps on the condition variable: no spin.
template <typename Pred>
void wait_until_true(CondVar& cv, Mutex& mu, Pred pred) PDKV_REQUIRES(mu) {
  while (!cv.wait_for(mu, std::chrono::hours(1), pred)) {
  }
}

CondVar& marker_cv() {
  static CondVar* cv = new CondVar();  // leaked: stream threads may outlive statics
  return *cv;
}

// Where one side of a copy really is: a pointer the CPU may touch, plus the allocation
// it lies in (held so that cuMemFree_v2 cannot unmap it mid-copy).
struct Resolved {
  uint8_t* ptr = nullptr;
  DeviceRange holder;
};

// Every stream, so that cuCtxSynchronize can wait for a context's (leaked with the rest).
struct StreamList {
  Mutex mu;
  std::set<CUstream_st*> all PDKV_GUARDED_BY(mu);
};
StreamList& streams() {
  static StreamList* list = new StreamList();
  return *list;
}

size_t extent(const CopyDesc& c, const CopySide& side) {
  if (c.width == 0 || c.height == 0) return 0;
  return (c.height - 1) * side.pitch + c.width;
}

bool is_device_address(uintptr_t addr) { return lookup(addr).kind == PointerKind::kDevice; }

// A device side must lie wholly inside one allocation; a host side must not be device
// memory (the CPU would fault on it: the driver's DMA engine would not, but a host pointer
// that is really a device address is a bug the fake reports instead of crashing).
CUresult resolve(const CopySide& side, size_t bytes, Resolved* out) {
  unsigned type = side.type;
  if (type == CU_MEMORYTYPE_UNIFIED) {
    type = is_device_address(side.addr) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
  }
  if (type == CU_MEMORYTYPE_DEVICE) {
    out->holder = find_device_range(side.addr, bytes);
    if (out->holder.pieces.empty()) return CUDA_ERROR_ILLEGAL_ADDRESS;
    const DeviceMapping& first = *out->holder.pieces.front();
    out->ptr = first.shadow + (side.addr - first.base);
    return CUDA_SUCCESS;
  }
  if (is_device_address(side.addr)) return CUDA_ERROR_ILLEGAL_ADDRESS;
  out->ptr = reinterpret_cast<uint8_t*>(side.addr);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult copy_now(const CopyDesc& c) {
  Resolved src, dst;
  if (CUresult r = resolve(c.src, extent(c, c.src), &src); r != CUDA_SUCCESS) return r;
  if (CUresult r = resolve(c.dst, extent(c, c.dst), &dst); r != CUDA_SUCCESS) return r;
  for (size_t row = 0; row < c.height && c.width > 0; ++row) {
    std::memmove(dst.ptr + row * c.dst.pitch, src.ptr + row * c.src.pitch, c.width);
  }
  return CUDA_SUCCESS;
}

namespace {

// Runs one op given the stream's error so far; returns the error the op leaves.
CUresult execute(Op& op, CUresult sticky) {
  switch (op.kind) {
    case Op::Kind::kCopy: {
      if (sticky != CUDA_SUCCESS) return sticky;
      unsigned delay = op.staged ? modes().pageable_delay_us.load() : modes().copy_delay_us.load();
      if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
      CUresult r = op.inject_failure ? CUDA_ERROR_ILLEGAL_ADDRESS : copy_now(op.copy);
      for (size_t i = 0; i < op.batch.size() && r == CUDA_SUCCESS; ++i) r = copy_now(op.batch[i]);
      if (!op.staged) modes().copies_executed.fetch_add(1);
      return r;
    }
    case Op::Kind::kRecord: {
      MutexLock lock(marker_mutex());
      op.marker->reached = true;
      op.marker->error = sticky;
      marker_cv().notify_all();
      return sticky;
    }
    case Op::Kind::kWait: {
      Marker* m = op.marker.get();
      MutexLock lock(marker_mutex());
      wait_until_true(marker_cv(), marker_mutex(),
                      [m]() PDKV_NO_THREAD_SAFETY_ANALYSIS { return m->reached; });
      return sticky;
    }
    case Op::Kind::kHostFn:
      // cuLaunchHostFunc's functions are not called once the context has faulted.
      if (sticky == CUDA_SUCCESS) op.fn(op.user_data);
      return sticky;
  }
  return sticky;
}

void worker_loop(CUstream_st* s) {
  for (;;) {
    Op op;
    CUresult sticky;
    {
      MutexLock lock(s->mu);
      wait_until_true(s->cv, s->mu, [s]() PDKV_NO_THREAD_SAFETY_ANALYSIS {
        return !s->queue.empty() || s->stopping;
      });
      if (s->queue.empty()) return;  // stopping, and everything queued has run
      op = std::move(s->queue.front());
      s->queue.pop_front();
      s->busy = true;
      // The stream's own fault, else its context's: after a fault anywhere in the context
      // no copy or host function runs on any of its streams.
      sticky = s->error != CUDA_SUCCESS ? s->error : s->ctx->sticky_error.load();
    }
    CUresult result = execute(op, sticky);
    if (result != CUDA_SUCCESS && op.kind == Op::Kind::kCopy) poison_context(s->ctx, result);
    op = Op();  // drop the allocation and marker it held before saying "done"
    MutexLock lock(s->mu);
    if (s->error == CUDA_SUCCESS) s->error = result;
    s->busy = false;
    s->cv.notify_all();
  }
}

void push(CUstream_st* s, Op op) {
  MutexLock lock(s->mu);
  s->queue.push_back(std::move(op));
  s->cv.notify_all();
}

void poison_host_destination(const CopyDesc& c) {
  if (c.dst.type == CU_MEMORYTYPE_DEVICE || is_device_address(c.dst.addr)) return;
  auto* dst = reinterpret_cast<uint8_t*>(c.dst.addr);
  for (size_t row = 0; row < c.height; ++row) std::memset(dst + row * c.dst.pitch, 0xA5, c.width);
}

}  // namespace

Mutex& marker_mutex() {
  static Mutex* mu = new Mutex();  // leaked with marker_cv()
  return *mu;
}

CUstream_st* create_stream(CUcontext ctx) {
  auto* s = new CUstream_st();
  s->ctx = ctx;
  s->worker = std::thread(worker_loop, s);
  StreamList& list = streams();
  MutexLock lock(list.mu);
  list.all.insert(s);
  return s;
}

void destroy_stream(CUstream_st* s) {
  {
    StreamList& list = streams();
    MutexLock lock(list.mu);
    list.all.erase(s);
  }
  {
    MutexLock lock(s->mu);
    s->stopping = true;
    s->cv.notify_all();
  }
  s->worker.join();
  delete s;
}

namespace {
bool idle(CUstream_st* s) PDKV_REQUIRES(s->mu) { return s->queue.empty() && !s->busy; }

CUresult wait_idle(CUstream_st* s) {
  MutexLock lock(s->mu);
  wait_until_true(s->cv, s->mu, [s]() PDKV_NO_THREAD_SAFETY_ANALYSIS { return idle(s); });
  return s->error;
}

// The context's legacy default stream, made at first use and never destroyed.
CUstream_st* legacy_stream(CUcontext ctx) {
  CUstream_st* s = ctx->legacy_stream.load();
  if (s != nullptr) return s;
  static Mutex* mu = new Mutex();
  MutexLock lock(*mu);
  s = ctx->legacy_stream.load();
  if (s == nullptr) {
    s = new CUstream_st();
    s->ctx = ctx;
    s->worker = std::thread(worker_loop, s);
    s->worker.detach();  // lives as long as the process, like the context
    ctx->legacy_stream.store(s);
  }
  return s;
}
}  // namespace

CUresult synchronize_stream(CUstream_st* s) {
  // The driver's default scheduling polls a stream to completion: a busy core, which is
  // what pdkv avoids by waiting on blocking-sync events instead.
  bool waited = false;
  for (;;) {
    {
      MutexLock lock(s->mu);
      if (idle(s)) {
        if (waited) modes().spin_waits.fetch_add(1);
        return s->error;
      }
    }
    waited = true;
    std::this_thread::yield();
  }
}

CUresult synchronize_context(CUcontext ctx) {
  if (CUstream_st* legacy = ctx->legacy_stream.load()) (void)wait_idle(legacy);
  // Under the list's lock, so no stream is destroyed while waited for.
  StreamList& list = streams();
  MutexLock lock(list.mu);
  for (CUstream_st* s : list.all) {
    if (s->ctx == ctx) (void)wait_idle(s);
  }
  return ctx->sticky_error.load();
}

void clear_context_error(CUcontext ctx) {
  ctx->sticky_error.store(CUDA_SUCCESS);
  if (CUstream_st* legacy = ctx->legacy_stream.load()) {
    MutexLock lock(legacy->mu);
    legacy->error = CUDA_SUCCESS;
  }
}

CUresult copy_sync(CUcontext ctx, const CopyDesc& c, bool pageable_upload) {
  CUstream_st* legacy = legacy_stream(ctx);
  // "A stream sync is performed before the copy is initiated."
  if (CUresult r = wait_idle(legacy); r != CUDA_SUCCESS) return r;
  if (!pageable_upload) {
    // Checked before it runs; an out-of-range synchronous copy is refused, not a fault.
    CUresult r = copy_now(c);
    return r == CUDA_ERROR_ILLEGAL_ADDRESS ? CUDA_ERROR_INVALID_VALUE : r;
  }
  if (find_device_range(c.dst.addr, c.width).pieces.empty()) return CUDA_ERROR_INVALID_VALUE;
  Op op;
  op.kind = Op::Kind::kCopy;
  op.staged = std::make_shared<std::vector<uint8_t>>(
      reinterpret_cast<const uint8_t*>(c.src.addr),
      reinterpret_cast<const uint8_t*>(c.src.addr) + c.width);
  op.copy = c;
  op.copy.src.addr = reinterpret_cast<uintptr_t>(op.staged->data());
  op.copy.src.pitch = c.width;
  push(legacy, std::move(op));
  return CUDA_SUCCESS;
}

namespace {
CUresult check_copy(const CopyDesc& c) {
  for (unsigned type : {c.src.type, c.dst.type}) {
    if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE &&
        type != CU_MEMORYTYPE_UNIFIED) {
      return CUDA_ERROR_INVALID_VALUE;  // arrays are not supported
    }
  }
  if (c.height > 1 && (c.src.pitch < c.width || c.dst.pitch < c.width)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
}  // namespace

CUresult enqueue_copy(CUstream_st* s, const CopyDesc& c) {
  return enqueue_copies(s, std::vector<CopyDesc>{c});
}

CUresult enqueue_copies(CUstream_st* s, std::vector<CopyDesc> copies) {
  if (copies.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (const CopyDesc& c : copies) {
    if (CUresult r = check_copy(c); r != CUDA_SUCCESS) return r;
  }
  if (modes().poison.load()) {
    for (const CopyDesc& c : copies) poison_host_destination(c);
  }
  Op op;
  op.kind = Op::Kind::kCopy;
  op.copy = copies.front();
  op.batch.assign(copies.begin() + 1, copies.end());
  op.inject_failure = take_injected_failure();
  push(s, std::move(op));
  return CUDA_SUCCESS;
}

void enqueue_record(CUstream_st* s, CUevent_st* event) {
  auto marker = std::make_shared<Marker>();
  {
    MutexLock lock(event->mu);
    event->latest = marker;
  }
  Op op;
  op.kind = Op::Kind::kRecord;
  op.marker = std::move(marker);
  push(s, std::move(op));
}

void enqueue_wait(CUstream_st* s, CUevent_st* event) {
  Op op;
  op.kind = Op::Kind::kWait;
  {
    MutexLock lock(event->mu);
    op.marker = event->latest;
  }
  if (op.marker == nullptr) return;  // never recorded: nothing to wait for
  push(s, std::move(op));
}

void enqueue_host_fn(CUstream_st* s, CUhostFn fn, void* user_data) {
  Op op;
  op.kind = Op::Kind::kHostFn;
  op.fn = fn;
  op.user_data = user_data;
  push(s, std::move(op));
}

namespace {
std::shared_ptr<Marker> latest(CUevent_st* event) {
  MutexLock lock(event->mu);
  return event->latest;
}
}  // namespace

CUresult query_event(CUevent_st* event) {
  std::shared_ptr<Marker> m = latest(event);
  if (m == nullptr) return CUDA_SUCCESS;
  MutexLock lock(marker_mutex());
  return m->reached ? m->error : CUDA_ERROR_NOT_READY;
}

CUresult synchronize_event(CUevent_st* event) {
  std::shared_ptr<Marker> m = latest(event);
  if (m == nullptr) return CUDA_SUCCESS;
  if ((event->flags & CU_EVENT_BLOCKING_SYNC) != 0) {
    MutexLock lock(marker_mutex());
    if (!m->reached) modes().blocking_waits.fetch_add(1);
    wait_until_true(marker_cv(), marker_mutex(),
                    [&m]() PDKV_NO_THREAD_SAFETY_ANALYSIS { return m->reached; });
    return m->error;
  }
  // Without CU_EVENT_BLOCKING_SYNC the driver polls: the waiting thread keeps a core busy
  // for as long as the wait lasts.
  bool waited = false;
  for (;;) {
    {
      MutexLock lock(marker_mutex());
      if (m->reached) {
        if (waited) modes().spin_waits.fetch_add(1);
        return m->error;
      }
    }
    waited = true;
    std::this_thread::yield();
  }
}

}  // namespace pdkv::fake_cuda
