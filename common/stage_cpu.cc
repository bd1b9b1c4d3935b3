#include "common/stage_cpu.h"

#include <time.h>

#include <atomic>

namespace pdkv {
namespace {

std::array<std::atomic<uint64_t>, kCpuStages> g_stage_ns{};

// The stage this thread runs now (kCount: none) and its CPU clock when it was entered
// or last charged.
thread_local CpuStage t_stage = CpuStage::kCount;
thread_local uint64_t t_mark_ns = 0;

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Charges the CPU since the last mark to the current stage and moves the mark.
void charge_current() {
  const uint64_t now = thread_cpu_ns();
  if (t_stage != CpuStage::kCount) {
    g_stage_ns[static_cast<size_t>(t_stage)].fetch_add(now - t_mark_ns, std::memory_order_relaxed);
  }
  t_mark_ns = now;
}

}  // namespace

std::string_view to_string(CpuStage stage) {
  switch (stage) {
    case CpuStage::kControl: return "control";
    case CpuStage::kPlanning: return "planning";
    case CpuStage::kSubmission: return "submission";
    case CpuStage::kCompletion: return "completion";
    case CpuStage::kApi: return "api";
    case CpuStage::kCount: break;
  }
  return "unknown";
}

std::array<double, kCpuStages> stage_cpu_seconds() {
  std::array<double, kCpuStages> out{};
  for (size_t i = 0; i < kCpuStages; ++i) {
    out[i] = static_cast<double>(g_stage_ns[i].load(std::memory_order_relaxed)) / 1e9;
  }
  return out;
}

StageCpuScope::StageCpuScope(CpuStage stage) : outer_(t_stage) {
  charge_current();
  t_stage = stage;
}

StageCpuScope::~StageCpuScope() {
  charge_current();
  t_stage = outer_;
}

}  // namespace pdkv
