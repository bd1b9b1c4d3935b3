#include "common/stop_signals.h"

#include <pthread.h>

namespace pdkv {

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int StopSignals::wait() {
  int sig = 0;
  sigwait(&set_, &sig);
  return sig;
}

}  // namespace pdkv
