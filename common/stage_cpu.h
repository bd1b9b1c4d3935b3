// Process-wide CPU time per stage of the managers' work (control messages, planning,
// submission, completion, the engine-facing calls), measured with each thread's own CPU
// clock (CLOCK_THREAD_CPUTIME_ID) around the stage: what a room costs, split by where it
// is spent, cheaply enough to stay on in production (two clock reads per scope, scopes
// taken per batch or per message, never per page).
//
// Scopes nest exclusively: a stage entered inside another (a pipeline pass run from a
// control message's handler) is charged to the inner stage only, and the outer one
// resumes after it, so the stages add up to no more than the threads' CPU.
//
// Thread safety: StageCpuScope belongs to its thread; the totals are relaxed atomics,
// read from any thread with stage_cpu_seconds().
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pdkv {

enum class CpuStage : uint8_t {
  kControl,     // control messages received: read, decoded, handled
  kPlanning,    // the prefill pipeline's chunks planned into pieces, rooms taken in
  kSubmission,  // batches handed to the transfer engine
  kCompletion,  // acknowledged or failed batches, opened sessions, rooms reported ended
  kApi,         // the engine-facing calls (send, send_metadata, init, poll) outside the above
  kCount,
};
inline constexpr size_t kCpuStages = static_cast<size_t>(CpuStage::kCount);

std::string_view to_string(CpuStage stage);

// CPU seconds charged to each stage in this process since it started.
std::array<double, kCpuStages> stage_cpu_seconds();

class StageCpuScope {
 public:
  explicit StageCpuScope(CpuStage stage);
  ~StageCpuScope();
  StageCpuScope(const StageCpuScope&) = delete;
  StageCpuScope& operator=(const StageCpuScope&) = delete;

 private:
  const CpuStage outer_;
};

}  // namespace pdkv
