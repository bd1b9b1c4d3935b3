#include "common/logging.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "common/common_settings.h"
#include "common/log_capture.h"

namespace pdkv {
namespace {

spdlog::level::level_enum level_from_env() {
  // Read before any Settings exists (the logger is process-wide), so from the environment
  // only, with the spec's name and default.
  const std::string name(config::kLogLevel.name);
  const std::string fallback(config::kLogLevel.string_default);
  const char* raw = std::getenv(name.c_str());
  if (raw == nullptr || *raw == '\0') return spdlog::level::from_str(fallback);
  auto level = spdlog::level::from_str(raw);
  // from_str maps anything unknown to "off"; a typo must not silence every log.
  if (level == spdlog::level::off && std::string(raw) != "off") {
    std::fprintf(stderr, "pdkv: %s=%s is not a level; using %s\n", name.c_str(), raw,
                 fallback.c_str());
    return spdlog::level::from_str(fallback);
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
