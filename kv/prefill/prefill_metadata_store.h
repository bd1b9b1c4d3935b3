// PrefillMetadataStore: the first sampled token and speculative candidate ids of each
// room, published by the engine after the prefill forward and consumed by the transfer
// worker that sends the room's final status, so Success never reaches a decode ahead of
// its token.
//
// Unlike the reference, the wait has a real deadline (PDKV_METADATA_TIMEOUT_S) and a
// publish for a room that is not open (it ended, or never existed) is dropped, so an
// ended room leaves nothing behind.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"

namespace pdkv::kv {

struct PrefillMetadata {
  int64_t bootstrap_token = -1;
  std::vector<int32_t> spec_candidate_ids;  // empty = none
};

class PrefillMetadataStore {
 public:
  // A room must be opened before metadata for it is accepted.
  void open(uint64_t room);
  // Removes the room and anything published for it; wakes its waiters.
  void close(uint64_t room);

  // Stores the value if the room is open and nothing was published yet (first publish
  // wins). Returns false when dropped.
  bool publish(uint64_t room, PrefillMetadata metadata);

  // The published value, or nullopt if none arrives before `deadline` or the room closes.
  std::optional<PrefillMetadata> wait(uint64_t room, TimePoint deadline);
  std::optional<PrefillMetadata> peek(uint64_t room) const;

  size_t size() const;

 private:
  struct Slot {
    std::optional<PrefillMetadata> value;
  };
  mutable Mutex mu_;
  CondVar published_;
  std::unordered_map<uint64_t, Slot> rooms_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::kv
