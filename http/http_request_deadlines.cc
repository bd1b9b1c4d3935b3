#include "http/http_request_deadlines.h"

#include <sys/socket.h>

#include <algorithm>

namespace pdkv::http {
namespace {

// With no connection to watch the thread still wakes now and then; opened() wakes it
// at once when the first connection arrives.
constexpr std::chrono::seconds kIdleWake{60};

}  // namespace

RequestDeadlines::RequestDeadlines(std::chrono::milliseconds deadline)
    : deadline_(deadline), thread_([this] { run(); }) {}

RequestDeadlines::~RequestDeadlines() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void RequestDeadlines::opened(const void* key, int fd) {
  bool first = false;
  {
    MutexLock lock(mu_);
    first = connections_.empty();
    connections_[key] = Connection{fd, now() + deadline_};
    if (first) rescan_ = true;
  }
  // Later deadlines never need a wake-up: the thread already waits for an earlier one.
  if (first) wake_.notify_all();
}

void RequestDeadlines::restarted(const void* key) {
  MutexLock lock(mu_);
  auto it = connections_.find(key);
  if (it != connections_.end() && !it->second.shut) it->second.deadline = now() + deadline_;
}

void RequestDeadlines::closed(const void* key) {
  MutexLock lock(mu_);
  connections_.erase(key);
}

uint64_t RequestDeadlines::expired() const {
  MutexLock lock(mu_);
  return expired_;
}

TimePoint RequestDeadlines::expire_overdue(TimePoint at) {
  TimePoint next = at + kIdleWake;
  for (auto& [key, c] : connections_) {
    if (c.shut) continue;
    if (c.deadline <= at) {
      // Under mu_: closed() for this connection cannot run, so fd is still its socket.
      ::shutdown(c.fd, SHUT_RDWR);
      c.shut = true;
      ++expired_;
    } else {
      next = std::min(next, c.deadline);
    }
  }
  return next;
}

void RequestDeadlines::run() {
  MutexLock lock(mu_);
  TimePoint next = now() + kIdleWake;
  while (!stopping_) {
    wake_.wait_until(mu_, next, [this]() PDKV_REQUIRES(mu_) { return stopping_ || rescan_; });
    if (stopping_) break;
    rescan_ = false;
    next = expire_overdue(now());
  }
}

}  // namespace pdkv::http
