// MemoryRegistry: the regions of this process that peers may write into.
//
// Every backend receiver validates each incoming write against it before touching
// memory: addresses come from the peer, and the reference wrote wherever they pointed
// (R6 in BENCHMARKS.md). Regions never overlap. check() accepts a range
// covered by registered memory; regions registered back to back count as one span,
// because senders merge blocks that continue each other and would otherwise be rejected
// when two such regions happen to be adjacent. No byte outside registered memory is ever
// accepted.
//
// Removal vs. in-flight writes: a receiver admits each part (admit(), which pins what it
// admitted in an Admission) before writing it and releases the Admission after the last
// byte landed. remove() unlinks the region at once (later checks fail) and then waits
// until every admission taken before that point is released, so memory is never written
// after remove() returns.
//
// Write grants (write_grant.h): with require_grants on, a write is admitted only if it
// names a live grant whose items cover it (and lies in registered memory, as always); a
// write that names a grant is checked against it even when grants are not required.
// revoke_grant() unlinks a grant at once (later writes naming it are refused) and reports
// when the writes admitted under it before have landed, so a room's pages can be reused
// without a late write of the old room landing in them. A grant revoked because its room
// succeeded (GrantEnd::kCompleted) is remembered for a while (the last
// kRememberedCompletedGrants): a later write naming it is still refused, but as
// kGrantCompleted, so a sender whose acknowledgement was lost learns that its bytes and
// status arrived instead of that it wrote out of bounds.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "engine/write_grant.h"

namespace pdkv::engine {

struct Region {
  uint64_t addr = 0;
  uint64_t length = 0;
};

// One destination range as a receiver sees it, and the write grant it lands under (0 =
// none; ignored by check_all(), which asks about registered memory only).
struct DstRange {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t grant = 0;
};

// Why admit() refused a run.
enum class Refusal : uint8_t {
  kNotWritable,     // outside registered memory, or outside (or naming no) live grant
  kGrantCompleted,  // names a grant revoked with GrantEnd::kCompleted (remembered)
};

// How many completed grants a registry remembers (oldest forgotten first): a retry comes
// within a second or two, when thousands of rooms end per second at most.
inline constexpr size_t kRememberedCompletedGrants = 16384;

class MemoryRegistry {
 public:
  MemoryRegistry() = default;
  MemoryRegistry(const MemoryRegistry&) = delete;
  MemoryRegistry& operator=(const MemoryRegistry&) = delete;

  // InvalidArgument for length 0 or addr+length overflow; FailedPrecondition on overlap.
  Status add(uint64_t addr, uint64_t length);
  // NotFound if no region starts at addr. Blocks until earlier admissions are released.
  Status remove(uint64_t addr, uint64_t* length_out = nullptr);

  // OK if [addr, addr+length) is covered by registered memory (length 0 is OK).
  // Otherwise OutOfRange; *first_bad (if given) is the first address not covered.
  Status check(uint64_t addr, uint64_t length, uint64_t* first_bad = nullptr) const;

  // Checks every range under one lock. Returns ranges.size() if all are covered, else the
  // index of the first bad one (with its first uncovered address in *first_bad).
  size_t check_all(std::span<const DstRange> ranges, uint64_t* first_bad) const;

  std::vector<Region> regions() const;

  // --- write grants ---
  // Off by default (the engine alone is a memory-to-memory copier); the KV managers turn
  // it on, so a peer writes only into what a room granted.
  void set_require_grants(bool on);
  bool requires_grants() const;
  // InvalidArgument for id 0, a malformed grant or a granted byte outside registered
  // memory; AlreadyExists if `id` is live. Normalizes the grant (write_grant.h).
  Status add_grant(uint64_t id, WriteGrant grant);
  // Unlinks the grant. `on_drained` (may be empty) runs exactly once, when no write
  // admitted under the grant is still landing: at once on this thread if none is, else
  // on the receiver thread whose write finishes last (it must be short and not block).
  // NotFound if `id` is not live (on_drained is then not called). `end` kCompleted
  // remembers the id (see the file comment).
  Status revoke_grant(uint64_t id, std::function<void()> on_drained,
                      GrantEnd end = GrantEnd::kWithdrawn);
  size_t grant_count() const;

  // One incoming write as a receiver sees it: `pieces` writes of `length` bytes, the i-th
  // at addr + i * stride, under `grant` (0 = none).
  struct WriteRun {
    uint64_t addr = 0;
    uint64_t length = 0;
    uint64_t pieces = 1;
    uint64_t stride = 0;
    uint64_t grant = 0;
  };
  // What admit() pinned for one part; release() (or the destructor) drops it once the
  // part's bytes landed. Reusable: a receiver keeps one per connection, so its vector's
  // capacity is reused and the hot path does not allocate.
  class Admission {
   public:
    Admission() = default;
    Admission(const Admission&) = delete;
    Admission& operator=(const Admission&) = delete;
    ~Admission() { release(); }
    void release();
    // The id of a pinned grant revoked at least `grace` before `at`, if any: its room ended
    // while this part was still landing. A receiver stops landing such a part, since until
    // it does the room's end stays hidden and its pages held (a writer trickling a byte at
    // a time would otherwise keep an aborted room alive as long as it liked).
    std::optional<uint64_t> revoked_for(std::chrono::nanoseconds grace, TimePoint at) const;

   private:
    friend class MemoryRegistry;
    struct GrantState;
    const MemoryRegistry* registry_ = nullptr;  // set while pinned
    uint64_t epoch_ = 0;
    std::vector<std::shared_ptr<GrantState>> grants_;
  };
  // Checks every run (registered memory; its grant, when grants are required or the run
  // names one) under one lock. Returns runs.size() and pins (unregister and revoke wait
  // for `admission`) if all are admitted; else the index of the first refused run, with
  // its first refused address in *first_bad and why in *why (each if given), and pins
  // nothing. `admission` must be released. A refusal names nothing outside the run
  // itself: an address in the run.
  size_t admit(std::span<const WriteRun> runs, Admission& admission, uint64_t* first_bad,
               Refusal* why = nullptr) const;

 private:
  // Caller holds mu_.
  bool covered(uint64_t addr, uint64_t length, uint64_t* first_bad) const PDKV_REQUIRES(mu_);
  // Caller holds mu_. Whether [addr, addr+length) is registered and inside `grant` (if any).
  bool writable(uint64_t addr, uint64_t length, const Admission::GrantState* grant,
                uint64_t* first_bad) const PDKV_REQUIRES(mu_);
  // Caller holds mu_. Whether one run passes (registered, and granted where needed).
  bool admits(const WriteRun& run, const Admission::GrantState* grant, uint64_t* first_bad) const
      PDKV_REQUIRES(mu_);
  void release(Admission& admission) const;

  mutable Mutex mu_;
  mutable CondVar pins_cv_;
  std::map<uint64_t, uint64_t> regions_ PDKV_GUARDED_BY(mu_);       // addr -> length
  uint64_t epoch_ PDKV_GUARDED_BY(mu_) = 1;                         // bumped by remove()
  mutable std::map<uint64_t, uint64_t> pins_ PDKV_GUARDED_BY(mu_);  // epoch -> live pins
  bool require_grants_ PDKV_GUARDED_BY(mu_) = false;
  std::unordered_map<uint64_t, std::shared_ptr<Admission::GrantState>> grants_ PDKV_GUARDED_BY(mu_);
  // Grants revoked as completed, oldest first (bounded by kRememberedCompletedGrants).
  std::deque<uint64_t> completed_order_ PDKV_GUARDED_BY(mu_);
  std::unordered_set<uint64_t> completed_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::engine
