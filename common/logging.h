// Logging through spdlog. One process-wide logger named "pdkv" writing to stderr with
// pid and thread id, level set once from PDKV_LOG_LEVEL (trace|debug|info|warn|error|off,
// default info). Use the PDKV_LOG_* macros; they are safe from any thread.
#pragma once

#include <spdlog/spdlog.h>

namespace pdkv {

// The shared logger; created on first use. Thread-safe.
spdlog::logger& logger();

}  // namespace pdkv

#define PDKV_LOG_TRACE(...) ::pdkv::logger().trace(__VA_ARGS__)
#define PDKV_LOG_DEBUG(...) ::pdkv::logger().debug(__VA_ARGS__)
#define PDKV_LOG_INFO(...) ::pdkv::logger().info(__VA_ARGS__)
#define PDKV_LOG_WARN(...) ::pdkv::logger().warn(__VA_ARGS__)
#define PDKV_LOG_ERROR(...) ::pdkv::logger().error(__VA_ARGS__)
