// LogCapture: hands pdkv's log lines to an embedding that wants them in its own logging
// (pdkv.log.bridge_logging() forwards them to Python's `logging`). Opt-in: until
// enable() the process logger writes to stderr only.
//
// The capturing side never blocks and never calls foreign code: a line is copied into a
// bounded queue (dropped and counted when full), and the embedding drains it from its
// own thread with take(). So a pdkv thread that logs while holding a lock cannot deadlock
// against, say, the Python interpreter's lock.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace spdlog::sinks {
class sink;
}

namespace pdkv::log_capture {

struct Line {
  int level = 0;  // spdlog::level::level_enum: 0 trace .. 5 critical
  std::string message;
  uint64_t thread_id = 0;
  double unix_time = 0;  // seconds since the epoch, when it was logged
};

// Starts capturing up to `capacity` unread lines; `keep_stderr` false stops the stderr
// copy meanwhile. Calling it again changes both.
void enable(size_t capacity, bool keep_stderr);
// Stops capturing (drops unread lines) and writes to stderr again.
void disable();
// Waits up to `wait` for a line, then returns every line queued (possibly none).
std::vector<Line> take(std::chrono::milliseconds wait);
// Lines dropped because the queue was full, since the process started.
uint64_t dropped();

// The process logger's sink (common/logging.cc): stderr, plus the queue while capturing.
std::shared_ptr<spdlog::sinks::sink> make_dispatch_sink();

}  // namespace pdkv::log_capture
