// The engine's handle and batch-state types: what TransferEngine (transfer_engine.h) hands
// out and reports, kept apart so the engine's internals (batch_table.h) can name them
// without including the engine itself.
//
// Handles are values (index + generation): a stale or foreign id is NotFound at the
// engine, never undefined behaviour. Thread safety: plain values.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace pdkv::engine {

struct SessionId {
  uint32_t index = 0;
  uint32_t generation = 0;  // 0 = never valid
  bool operator==(const SessionId&) const = default;
};

struct BatchId {
  uint32_t index = 0;
  uint32_t generation = 0;  // 0 = never valid
  bool operator==(const BatchId&) const = default;
};

// Progress is not an error: state and error are separate.
enum class BatchState : uint8_t { kPending, kSucceeded, kFailed };

struct BatchStatus {
  BatchState state = BatchState::kPending;
  Status error;  // set only when state == kFailed
};

}  // namespace pdkv::engine
