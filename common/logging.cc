#include "common/logging.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "common/common_settings.h"
#include "common/log_capture.h"

namespace pdkv {
namespace {

spdlog::level::level_enum level_from_env() {
  const char* raw = std::getenv(std::string(config::kLogLevel.name).c_str());
  if (raw == nullptr || *raw == '\0') return spdlog::level::info;
  auto level = spdlog::level::from_str(raw);
  // from_str maps anything unknown to "off"; a typo must not silence every log.
  if (level == spdlog::level::off && std::string(raw) != "off") {
    std::fprintf(stderr, "pdkv: PDKV_LOG_LEVEL=%s is not a level; using info\n", raw);
    return spdlog::level::info;
  }
  return level;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto log = std::make_shared<spdlog::logger>("pdkv", log_capture::make_dispatch_sink());
  log->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [pdkv %P:%t] [%^%l%$] %v");
  log->set_level(level_from_env());
  log->flush_on(spdlog::level::warn);
  return log;
}

}  // namespace

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = make_logger();
  return *instance;
}

}  // namespace pdkv

namespace pdkv {

bool LogRateLimiter::allow(uint64_t* suppressed) {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t start = window_start_ms_.load(std::memory_order_relaxed);
  if (now_ms - start >= 1000 &&
      window_start_ms_.compare_exchange_strong(start, now_ms, std::memory_order_relaxed)) {
    in_window_.store(0, std::memory_order_relaxed);
  }
  if (in_window_.fetch_add(1, std::memory_order_relaxed) >= per_second_) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
  return true;
}

}  // namespace pdkv
