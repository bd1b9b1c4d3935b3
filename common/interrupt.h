// Interrupt: a one-shot signal that ends blocking waits early, so an owner's shutdown
// never waits out a deadline its threads are sleeping towards (a route lookup retrying
// until a room's 120 s bootstrap timeout).
//
// Waiters either sleep on it (sleep_for: returns early when it fires), poll fired() between
// short slices of a wait of their own, or hold a Hook whose function fire() runs (closing
// an HTTP connection a call is blocked reading). fire() is idempotent.
//
// Thread safety: every method may be called from any thread. Hook functions run under the
// interrupt's lock, on the thread calling fire() (or the one adding a hook to a fired
// interrupt): they must be short and must not call back into the interrupt.
#pragma once

#include <atomic>
#include <functional>
#include <list>

#include "common/clock.h"
#include "common/mutex.h"

namespace pdkv {

class Interrupt {
 public:
  Interrupt() = default;
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

  void fire() {
    MutexLock lock(mu_);
    if (fired_.exchange(true)) return;
    for (auto& fn : hooks_) fn();
    wake_.notify_all();
  }
  // Lock-free, so a waiter may ask under a lock of its own.
  bool fired() const { return fired_.load(); }

  // Sleeps `d` or until fired; true if fired.
  bool sleep_for(std::chrono::nanoseconds d) const {
    MutexLock lock(mu_);
    return wake_.wait_until(mu_, now() + std::chrono::duration_cast<SteadyClock::duration>(d),
                            [&] { return fired_.load(); });
  }

  // Runs `fn` when the interrupt fires (at once if it has) until the hook is dropped;
  // dropping it waits for a run in progress, so `fn`'s captures may go right after.
  class Hook {
   public:
    Hook(const Interrupt* interrupt, std::function<void()> fn) : interrupt_(interrupt) {
      if (interrupt_ == nullptr) return;
      MutexLock lock(interrupt_->mu_);
      if (interrupt_->fired_.load()) {
        fn();
        interrupt_ = nullptr;
        return;
      }
      it_ = interrupt_->hooks_.insert(interrupt_->hooks_.end(), std::move(fn));
    }
    ~Hook() {
      if (interrupt_ == nullptr) return;
      MutexLock lock(interrupt_->mu_);
      interrupt_->hooks_.erase(it_);
    }
    Hook(const Hook&) = delete;
    Hook& operator=(const Hook&) = delete;

   private:
    const Interrupt* interrupt_;
    std::list<std::function<void()>>::iterator it_;
  };

 private:
  mutable Mutex mu_;
  mutable CondVar wake_;
  std::atomic<bool> fired_{false};
  mutable std::list<std::function<void()>> hooks_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv
