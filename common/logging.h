// Logging through spdlog. One process-wide logger named "pdkv" writing to stderr with
// pid and thread id, level set once from PDKV_LOG_LEVEL (trace|debug|info|warn|error|off,
// default info). Use the PDKV_LOG_* macros; they are safe from any thread.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdint>

namespace pdkv {

// The shared logger; created on first use. Thread-safe.
spdlog::logger& logger();

}  // namespace pdkv

#define PDKV_LOG_TRACE(...) ::pdkv::logger().trace(__VA_ARGS__)
#define PDKV_LOG_DEBUG(...) ::pdkv::logger().debug(__VA_ARGS__)
#define PDKV_LOG_INFO(...) ::pdkv::logger().info(__VA_ARGS__)
#define PDKV_LOG_WARN(...) ::pdkv::logger().warn(__VA_ARGS__)
#define PDKV_LOG_ERROR(...) ::pdkv::logger().error(__VA_ARGS__)

namespace pdkv {

// Lets at most `per_second` lines through per one-second window; counts the rest. One per
// call site (PDKV_LOG_WARN_LIMITED): a peer that floods malformed input must not flood the
// log, nor make logging the bottleneck. Thread-safe.
class LogRateLimiter {
 public:
  explicit LogRateLimiter(uint32_t per_second = 10) : per_second_(per_second) {}
  // True if this line may be logged; *suppressed is then the number of lines dropped since
  // the last one let through.
  bool allow(uint64_t* suppressed);

 private:
  const uint32_t per_second_;
  std::atomic<int64_t> window_start_ms_{0};
  std::atomic<uint32_t> in_window_{0};
  std::atomic<uint64_t> suppressed_{0};
};

}  // namespace pdkv

// A line a peer can trigger (input from the network: a malformed or refused message, a
// room a peer opened): rate-limited per call site (10 lines/s), with the count of lines
// dropped before it, so a peer that floods the process cannot flood its log. `level` is
// an spdlog::logger method: warn, error, info.
#define PDKV_LOG_LIMITED(level, ...)                                                   \
  do {                                                                                 \
    static ::pdkv::LogRateLimiter pdkv_log_limiter_;                                   \
    uint64_t pdkv_log_suppressed_ = 0;                                                 \
    if (pdkv_log_limiter_.allow(&pdkv_log_suppressed_)) {                              \
      if (pdkv_log_suppressed_ > 0) {                                                  \
        ::pdkv::logger().level("({} similar lines suppressed)", pdkv_log_suppressed_); \
      }                                                                                \
      ::pdkv::logger().level(__VA_ARGS__);                                             \
    }                                                                                  \
  } while (0)
#define PDKV_LOG_WARN_LIMITED(...) PDKV_LOG_LIMITED(warn, __VA_ARGS__)
#define PDKV_LOG_ERROR_LIMITED(...) PDKV_LOG_LIMITED(error, __VA_ARGS__)
