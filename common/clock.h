// Monotonic time helpers. Every timeout in pdkv is measured on steady_clock so that a
// wall-clock jump can neither fire nor suppress it.
#pragma once

#include <chrono>
#include <cstdint>

namespace pdkv {

using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;
using Millis = std::chrono::milliseconds;

inline TimePoint now() { return SteadyClock::now(); }

inline int64_t elapsed_ms(TimePoint since) {
  return std::chrono::duration_cast<Millis>(SteadyClock::now() - since).count();
}

inline double elapsed_s(TimePoint since) {
  return std::chrono::duration<double>(SteadyClock::now() - since).count();
}

}  // namespace pdkv
