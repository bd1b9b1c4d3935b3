#include "engine/conformance/backend_harness.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/backends/shm/shm_backend.h"
#ifdef PDKV_HAVE_UCX
#include "engine/backends/ucx/ucx_backend.h"
#endif

namespace pdkv::engine::testing {

void RecordingSink::on_complete(uint64_t token, Status status) {
  MutexLock lock(mu_);
  done_[token] = std::move(status);
  ++count_[token];
  cv_.notify_all();
}

Status RecordingSink::wait(uint64_t token, std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  bool ok = cv_.wait_for(mu_, timeout, [&]() PDKV_REQUIRES(mu_) { return done_.count(token) > 0; });
  if (!ok) return deadline_exceeded("no completion for token " + std::to_string(token));
  return done_[token];
}

int RecordingSink::completions(uint64_t token) {
  MutexLock lock(mu_);
  return count_[token];
}

Result<std::unique_ptr<BackendBox>> make_named_backend(
    const std::string& name, std::shared_ptr<const ClusterKey> cluster_key) {
  auto box = std::make_unique<BackendBox>();
  box->options.backend = name;
  box->options.connect_timeout_ms = 2000;
  box->options.cluster_key = std::move(cluster_key);
  BackendContext ctx{&box->options, &box->registry, &box->sink};
  if (name == "shm") {
    PDKV_ASSIGN_OR_RETURN(auto opts, shm::ShmOptions::from_env());
    PDKV_ASSIGN_OR_RETURN(box->backend, shm::make_shm_backend(ctx, opts));
#ifdef PDKV_HAVE_UCX
  } else if (name == "ucx") {
    PDKV_ASSIGN_OR_RETURN(auto opts, ucx::UcxOptions::from_env());
    PDKV_ASSIGN_OR_RETURN(box->backend, ucx::make_ucx_backend(ctx, opts));
#endif
  } else {
    return failed_precondition("backend '" + name + "' is not built into this test");
  }
  PDKV_ASSIGN_OR_RETURN(box->endpoint, box->backend->listen());
  return box;
}

SecretFile::SecretFile(uint8_t fill) {
  char path[] = "/tmp/pdkv-secret-XXXXXX";
  int fd = ::mkstemp(path);  // mode 0600, as ClusterKey::from_file requires
  if (fd < 0) std::abort();
  const std::vector<uint8_t> secret(32, fill);
  if (::write(fd, secret.data(), secret.size()) != static_cast<ssize_t>(secret.size())) {
    std::abort();
  }
  ::close(fd);
  path_ = path;
  auto key = ClusterKey::from_file(path_);
  if (!key.ok()) std::abort();
  key_ = *key;
}

SecretFile::~SecretFile() { ::unlink(path_.c_str()); }

GuardedRegion::GuardedRegion(uint64_t length) : length_(length) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  canary_bytes_ = page;
  const uint64_t body = (length + page - 1) / page * page;
  map_bytes_ = page * 4 + body;
  void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  base_ = static_cast<uint8_t*>(p);
  mprotect(base_, page, PROT_NONE);
  mprotect(base_ + map_bytes_ - page, page, PROT_NONE);
  // The region ends exactly at the second canary page; its start is offset so that an
  // overrun of even one byte past the end lands in the canary.
  region_ = base_ + 2 * page + (body - length);
  std::memset(base_ + page, kCanary, page + (body - length));
  std::memset(region_ + length, kCanary, page);
}

GuardedRegion::~GuardedRegion() { munmap(base_, map_bytes_); }

// The region is written by a peer process (CMA: in the kernel) or by UCX's transport on
// the worker thread (tcp/posix emulate puts with memcpy); the order against this read
// is set by the control plane through sockets and pipes, which TSan cannot see. So the
// two checkers that read the region are not instrumented (test code only).
#if defined(__clang__)
#define PDKV_TEST_NO_TSAN __attribute__((no_sanitize("thread")))
#else
#define PDKV_TEST_NO_TSAN
#endif

PDKV_TEST_NO_TSAN bool GuardedRegion::canaries_intact() const {
  const uint8_t* lo = base_ + canary_bytes_;
  for (const uint8_t* q = lo; q < region_; ++q) {
    if (*q != kCanary) return false;
  }
  for (uint64_t i = 0; i < canary_bytes_; ++i) {
    if (region_[length_ + i] != kCanary) return false;
  }
  return true;
}

PDKV_TEST_NO_TSAN uint64_t fnv64(const uint8_t* p, uint64_t n) {
  // Word at a time: 1 GiB hashes in well under a second even in sanitizer builds.
  uint64_t h = 1469598103934665603ull;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, p + i, 8);  // inlined: the memcpy interceptor would see it
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace pdkv::engine::testing
