// SIGTERM and SIGINT taken by a command's main thread instead of a signal handler, so
// that shutdown runs in ordinary code (a handler could only set a flag).
//
// Construct it before any thread exists: threads inherit the blocked mask, so the signals
// stay pending until wait() takes them.
#pragma once

#include <signal.h>

namespace pdkv {

class StopSignals {
 public:
  // Blocks SIGTERM and SIGINT for this thread and the threads it starts later.
  StopSignals();
  // Returns the signal once one arrived (blocks until then).
  int wait();

 private:
  sigset_t set_;
};

}  // namespace pdkv
