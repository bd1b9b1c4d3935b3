#include "engine/backends/ucx/ucx_worker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <system_error>

#include "common/logging.h"

namespace pdkv::engine::ucx {
namespace {

constexpr int kIdleTickMs = 20;

std::string ucs_error(const char* what, ucs_status_t st) {
  return std::string(what) + ": " + ucs_status_string(st);
}

}  // namespace

Result<std::unique_ptr<UcxWorker>> UcxWorker::create(std::shared_ptr<UcxContext> context) {
  PDKV_RETURN_IF_ERROR(context->acquire_worker());
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  w->context_ = std::move(context);  // from here on the destructor releases the slot
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t st = ucp_worker_create(w->context_->get(), &wp, &w->worker_);
  if (st != UCS_OK) {
    w->worker_ = nullptr;
    return unavailable(ucs_error("ucp_worker_create", st));
  }
  if (w->context_->wakeup()) {
    if (ucp_worker_get_efd(w->worker_, &w->ucx_efd_) != UCS_OK) w->ucx_efd_ = -1;
  }
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  st = ucp_worker_get_address(w->worker_, &addr, &len);
  if (st != UCS_OK) return internal_error(ucs_error("ucp_worker_get_address", st));
  w->address_.assign(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(w->worker_, addr);
  w->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->wake_fd_ < 0) return internal_error("eventfd failed");
  UcxWorker* raw = w.get();
  try {
    w->thread_ = std::thread([raw] { raw->loop(); });
  } catch (const std::system_error& e) {
    return unavailable(std::string("ucx: no thread for a worker: ") + e.what());
  }
  return w;
}

UcxWorker::~UcxWorker() {
  if (thread_.joinable()) {
    stopping_.store(true);
    wake();
    thread_.join();
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  context_->release_worker();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void UcxWorker::wake() {
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void UcxWorker::run(std::function<void()> fn) {
  {
    MutexLock lock(queue_mu_);
    queue_.push_back(std::move(fn));
  }
  wake();
}

void UcxWorker::run_sync(const std::function<void()>& fn) {
  Mutex mu;
  CondVar cv;
  bool done = false;
  run([&] {
    fn();
    MutexLock lock(mu);
    done = true;
    cv.notify_all();
  });
  MutexLock lock(mu);
  while (!cv.wait_for(mu, std::chrono::seconds(10), [&]() PDKV_REQUIRES(mu) { return done; })) {
    PDKV_LOG_WARN("ucx: waiting for the worker thread");
  }
}

void UcxWorker::add_busy(int delta) {
  busy_.fetch_add(delta);
  if (delta > 0) wake();
}

void UcxWorker::loop() {
  std::deque<std::function<void()>> batch;
  while (!stopping_.load()) {
    {
      MutexLock lock(queue_mu_);
      batch.swap(queue_);
    }
    for (auto& fn : batch) fn();
    batch.clear();
    unsigned progressed = ucp_worker_progress(worker_);
    if (busy_.load() > 0 || progressed != 0) continue;
    {
      MutexLock lock(queue_mu_);
      if (!queue_.empty()) continue;
    }
    // Arm only when nothing is pending inside UCX (BUSY = more events to progress).
    if (ucx_efd_ >= 0 && ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {ucx_efd_, POLLIN, 0}};
    ::poll(fds, ucx_efd_ >= 0 ? 2 : 1, kIdleTickMs);
    uint64_t drained = 0;
    ssize_t ignored = ::read(wake_fd_, &drained, sizeof(drained));
    (void)ignored;
  }
  // Run what was queued so that run_sync() callers and cleanups are not stranded.
  MutexLock lock(queue_mu_);
  for (auto& fn : queue_) fn();
  queue_.clear();
}

std::string endpoint_transports(ucp_ep_h ep) {
  char* text = nullptr;
  size_t len = 0;
  FILE* mem = open_memstream(&text, &len);
  if (mem == nullptr) return "?";
  ucp_ep_print_info(ep, mem);
  std::fclose(mem);
  // Lines look like "#  lane[0]:  1:tcp/lo.0 md[0] -> ...".
  std::set<std::string> seen;
  std::istringstream in(std::string(text, len));
  std::free(text);
  std::string line;
  while (std::getline(in, line)) {
    auto lane = line.find("lane[");
    if (lane == std::string::npos) continue;
    auto colon = line.find(':', line.find("]:", lane) + 2);
    if (colon == std::string::npos) continue;
    auto end = line.find_first_of(" \t", colon);
    std::string tl = line.substr(colon + 1, end - colon - 1);
    auto dot = tl.rfind('.');
    if (dot != std::string::npos) tl.resize(dot);
    seen.insert(tl);
  }
  std::string out;
  for (const auto& s : seen) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "?" : out;
}

bool asks_beyond_tcp(const std::string& tls) {
  if (tls.empty()) return false;
  for (const char* fast : {"posix", "sysv", "cma", "knem", "xpmem", "sm", "shm", "rc", "ud", "dc",
                           "ib", "mlx", "cuda", "rocm", "gdr"}) {
    if (tls.find(fast) != std::string::npos) return true;
  }
  return false;
}

bool rma_in_hardware(const std::string& tls) {
  for (const char* hw : {"rc", "dc", "ib", "mlx", "cuda_ipc", "rocm_ipc", "gdr", "xpmem", "knem"}) {
    if (tls.find(hw) != std::string::npos) return true;
  }
  return false;
}

}  // namespace pdkv::engine::ucx
