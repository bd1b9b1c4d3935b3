#include "engine/device/fake/fake_state.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace pdkv::fake_cuda {
namespace {

std::once_flag g_init_once;
std::atomic<bool> g_initialized{false};
// Written once under g_init_once before g_initialized is set (release), read after it is
// seen set (acquire): no lock needed afterwards.
std::vector<std::unique_ptr<CUctx_st>>* g_contexts = nullptr;

thread_local CUcontext t_current = nullptr;

long env_long(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  return *end == '\0' ? value : fallback;
}

void init_once() {
  long count = env_long("PDKV_FAKE_CUDA_DEVICES", 2);
  if (count < 0) count = 0;
  if (count > 64) count = 64;
  // Leaked on purpose: contexts outlive every other static (threads may still use them).
  static auto* contexts = new std::vector<std::unique_ptr<CUctx_st>>();
  for (int d = 0; d < count; ++d) {
    auto ctx = std::make_unique<CUctx_st>();
    ctx->device = d;
    contexts->push_back(std::move(ctx));
  }
  g_contexts = contexts;
  Modes& m = modes();
  long delay = env_long("PDKV_FAKE_CUDA_DELAY_US", 0);
  if (delay > 0) m.copy_delay_us.store(static_cast<unsigned>(delay));
  if (env_long("PDKV_FAKE_CUDA_POISON", 0) != 0) m.poison.store(true);
  long fail = env_long("PDKV_FAKE_CUDA_FAIL_COPY_AFTER", -1);
  if (fail > 0) m.fail_countdown.store(fail);
  long pitch = env_long("PDKV_FAKE_CUDA_MAX_PITCH", 0);
  if (pitch > 0) m.max_pitch.store(static_cast<size_t>(pitch));
  long pageable = env_long("PDKV_FAKE_CUDA_PAGEABLE_DELAY_US", -1);
  if (pageable >= 0) m.pageable_delay_us.store(static_cast<unsigned>(pageable));
  g_initialized.store(true, std::memory_order_release);
}

}  // namespace

CUresult init(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;  // the driver requires 0
  std::call_once(g_init_once, init_once);
  return CUDA_SUCCESS;
}

bool initialized() { return g_initialized.load(std::memory_order_acquire); }

int device_count() { return initialized() ? static_cast<int>(g_contexts->size()) : 0; }

CUctx_st* primary_context(int device) {
  if (device < 0 || device >= device_count()) return nullptr;
  return (*g_contexts)[static_cast<size_t>(device)].get();
}

bool is_context(CUcontext ctx) {
  if (ctx == nullptr) return false;
  for (int d = 0; d < device_count(); ++d) {
    if (primary_context(d) == ctx) return true;
  }
  return false;
}

CUcontext current_context() { return t_current; }
void set_current_context(CUcontext ctx) { t_current = ctx; }

CUresult require_context(CUcontext* ctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (t_current == nullptr || t_current->refcount.load() <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = t_current;
  return t_current->sticky_error.load();
}

void poison_context(CUcontext ctx, CUresult error) {
  CUresult none = CUDA_SUCCESS;
  ctx->sticky_error.compare_exchange_strong(none, error);
}

Modes& modes() {
  static Modes* m = new Modes();  // leaked: stream threads may read it during exit
  return *m;
}

bool take_injected_failure() {
  std::atomic<long>& left = modes().fail_countdown;
  long n = left.load();
  while (n > 0) {
    if (left.compare_exchange_weak(n, n - 1)) return n == 1;
  }
  return false;
}

}  // namespace pdkv::fake_cuda
