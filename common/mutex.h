// Mutex, MutexLock and CondVar: std::mutex / std::condition_variable with clang
// thread-safety annotations, so "which mutex guards this field" is checked at compile
// time (PDKV_GUARDED_BY) instead of stated in a comment.
//
// Thread safety: Mutex and CondVar are meant to be shared; MutexLock is a scoped guard
// owned by one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace pdkv {

class PDKV_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() PDKV_ACQUIRE() { mu_.lock(); }
  void unlock() PDKV_RELEASE() { mu_.unlock(); }
  bool try_lock() PDKV_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

class PDKV_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) PDKV_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() PDKV_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Waits always carry a deadline or a predicate; there is no bare wait() because an
// unbounded wait is how the reference hangs (its layer and first-token waits had no
// deadline).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

  // REQUIRES: mu is held. Returns pred() at the end (false = timed out).
  template <typename Pred>
  bool wait_until(Mutex& mu, std::chrono::steady_clock::time_point deadline, Pred pred)
      PDKV_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    bool result = cv_.wait_until(lock, deadline, pred);
    lock.release();  // ownership stays with the caller's MutexLock
    return result;
  }

  template <typename Rep, typename Period, typename Pred>
  bool wait_for(Mutex& mu, std::chrono::duration<Rep, Period> timeout, Pred pred)
      PDKV_REQUIRES(mu) {
    return wait_until(mu, std::chrono::steady_clock::now() + timeout, pred);
  }

 private:
  std::condition_variable cv_;
};

}  // namespace pdkv
