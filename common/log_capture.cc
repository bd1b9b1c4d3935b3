#include "common/log_capture.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <atomic>
#include <deque>
#include <mutex>

#include "common/mutex.h"

namespace pdkv::log_capture {
namespace {

struct Queue {
  Mutex mu;
  CondVar ready;
  std::deque<Line> lines PDKV_GUARDED_BY(mu);
  size_t capacity PDKV_GUARDED_BY(mu) = 0;  // 0 = not capturing
  std::atomic<bool> capturing{false};
  std::atomic<bool> keep_stderr{true};
  std::atomic<uint64_t> dropped{0};
};

Queue& queue() {
  static auto* q = new Queue();  // leaked: pdkv threads may log during static destruction
  return *q;
}

}  // namespace

// The process logger's only sink (common/logging.cc): stderr unless capture turned it
// off, plus the queue while capturing.
class DispatchSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  DispatchSink() : stderr_(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    Queue& q = queue();
    if (!q.capturing.load(std::memory_order_relaxed) || q.keep_stderr.load()) stderr_->log(msg);
    if (!q.capturing.load(std::memory_order_relaxed)) return;
    Line line;
    line.level = static_cast<int>(msg.level);
    line.message.assign(msg.payload.data(), msg.payload.size());
    line.thread_id = msg.thread_id;
    line.unix_time = std::chrono::duration<double>(msg.time.time_since_epoch()).count();
    MutexLock lock(q.mu);
    if (q.lines.size() >= q.capacity) {
      q.dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    q.lines.push_back(std::move(line));
    q.ready.notify_one();
  }
  void flush_() override { stderr_->flush(); }
  // The logger's pattern is for the stderr copy; captured lines carry the bare message.
  void set_pattern_(const std::string& pattern) override { stderr_->set_pattern(pattern); }
  void set_formatter_(std::unique_ptr<spdlog::formatter> formatter) override {
    stderr_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> stderr_;
};

std::shared_ptr<spdlog::sinks::sink> make_dispatch_sink() {
  return std::make_shared<DispatchSink>();
}

void enable(size_t capacity, bool keep_stderr) {
  Queue& q = queue();
  MutexLock lock(q.mu);
  q.capacity = capacity == 0 ? 1 : capacity;
  q.keep_stderr.store(keep_stderr);
  q.capturing.store(true);
}

void disable() {
  Queue& q = queue();
  MutexLock lock(q.mu);
  q.capturing.store(false);
  q.keep_stderr.store(true);
  q.lines.clear();
  q.capacity = 0;
  q.ready.notify_all();
}

std::vector<Line> take(std::chrono::milliseconds wait) {
  Queue& q = queue();
  MutexLock lock(q.mu);
  q.ready.wait_until(q.mu, std::chrono::steady_clock::now() + wait,
                     [&]() PDKV_REQUIRES(q.mu) { return !q.lines.empty(); });
  std::vector<Line> out(std::make_move_iterator(q.lines.begin()),
                        std::make_move_iterator(q.lines.end()));
  q.lines.clear();
  return out;
}

uint64_t dropped() { return queue().dropped.load(std::memory_order_relaxed); }

}  // namespace pdkv::log_capture
