// StepCounter: the layerwise-streaming handshake between the forward pass and the
// transfer pipeline, in host memory.
//
// Before a forward batch the engine reserves layer_num steps (reserve() returns the
// batch's begin step B); the forward calls mark_ready(1) after each layer's KV is
// written. Layer group [g0, g1) of a chunk reserved at B may be sent once
// ready() >= B + g1. Unlike the reference's 100 µs sleep loop, nobody waits on it: the
// pipeline plans a group when it sees ready() reach it, and PrefillManager wakes the
// pipeline after every mark_ready() (TransferPipeline::steps_advanced).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>

#include "common/mutex.h"

namespace pdkv::kv {

class StepCounter {
 public:
  // Returns the current reservation and advances it by `layers`.
  int64_t reserve(int64_t layers);
  void mark_ready(int64_t layers);
  int64_t ready() const;
  // The begin step of the latest reservation (what a chunk sent now streams against).
  int64_t last_reservation() const;

 private:
  mutable Mutex mu_;
  int64_t reserved_ PDKV_GUARDED_BY(mu_) = 0;
  int64_t last_begin_ PDKV_GUARDED_BY(mu_) = 0;
  int64_t ready_ PDKV_GUARDED_BY(mu_) = 0;
};

}  // namespace pdkv::kv
