#include "engine/memory_registry.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <string>

#include "common/logging.h"
#include "engine/grant_tag.h"

namespace pdkv::engine {
namespace {
std::string hex(uint64_t v) { return fmt::format("{:#x}", v); }
}  // namespace

Status MemoryRegistry::add(uint64_t addr, uint64_t length) {
  if (length == 0) return invalid_argument("register_memory: length 0 at " + hex(addr));
  if (addr > std::numeric_limits<uint64_t>::max() - length) {
    return invalid_argument("register_memory: range " + hex(addr) + "+" + std::to_string(length) +
                            " overflows");
  }
  MutexLock lock(mu_);
  auto next = regions_.lower_bound(addr);
  if (next != regions_.end() && next->first < addr + length) {
    return failed_precondition("register_memory: " + hex(addr) + "+" + std::to_string(length) +
                               " overlaps region " + hex(next->first));
  }
  if (next != regions_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > addr) {
      return failed_precondition("register_memory: " + hex(addr) + "+" + std::to_string(length) +
                                 " overlaps region " + hex(prev->first));
    }
  }
  regions_.emplace(addr, length);
  return Status();
}

Status MemoryRegistry::remove(uint64_t addr, uint64_t* length_out) {
  MutexLock lock(mu_);
  auto it = regions_.find(addr);
  if (it == regions_.end()) return not_found("unregister_memory: no region at " + hex(addr));
  if (length_out != nullptr) *length_out = it->second;
  regions_.erase(it);
  // Pins taken from now on validate against the shrunken map; wait only for older ones.
  const uint64_t removal_epoch = epoch_++;
  while (!pins_cv_.wait_for(mu_, std::chrono::seconds(1), [&]() PDKV_REQUIRES(mu_) {
    return pins_.empty() || pins_.begin()->first > removal_epoch;
  })) {
    PDKV_LOG_DEBUG("unregister_memory {}: waiting for writes in flight", hex(addr));
  }
  return Status();
}

bool MemoryRegistry::covered(uint64_t addr, uint64_t length, uint64_t* first_bad) const {
  if (length == 0) return true;
  uint64_t cursor = addr;
  // Overflow-safe end: a range that wraps is never covered.
  if (addr > std::numeric_limits<uint64_t>::max() - length) {
    if (first_bad != nullptr) *first_bad = addr;
    return false;
  }
  const uint64_t end = addr + length;
  auto it = regions_.upper_bound(cursor);
  if (it == regions_.begin()) {
    if (first_bad != nullptr) *first_bad = cursor;
    return false;
  }
  --it;
  while (true) {
    const uint64_t region_end = it->first + it->second;
    if (cursor < it->first || cursor >= region_end) {
      if (first_bad != nullptr) *first_bad = cursor;
      return false;
    }
    if (end <= region_end) return true;
    cursor = region_end;
    ++it;
    if (it == regions_.end() || it->first != cursor) {
      if (first_bad != nullptr) *first_bad = cursor;
      return false;
    }
  }
}

Status MemoryRegistry::check(uint64_t addr, uint64_t length, uint64_t* first_bad) const {
  uint64_t bad = 0;
  bool ok;
  {
    MutexLock lock(mu_);
    ok = covered(addr, length, &bad);
  }
  if (ok) return Status();
  if (first_bad != nullptr) *first_bad = bad;
  return out_of_range("range " + hex(addr) + "+" + std::to_string(length) +
                      " is not in registered memory (first bad address " + hex(bad) + ")");
}

size_t MemoryRegistry::check_all(std::span<const DstRange> ranges, uint64_t* first_bad) const {
  MutexLock lock(mu_);
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (!covered(ranges[i].addr, ranges[i].length, first_bad)) return i;
  }
  return ranges.size();
}

std::vector<Region> MemoryRegistry::regions() const {
  MutexLock lock(mu_);
  std::vector<Region> out;
  out.reserve(regions_.size());
  for (const auto& [addr, length] : regions_) out.push_back(Region{addr, length});
  return out;
}

// --- write grants ---

struct MemoryRegistry::Admission::GrantState {
  uint64_t id = 0;
  WriteGrant grant;
  uint64_t pins = 0;  // admitted writes still landing (guarded by the registry's mu_)
  bool revoked = false;
  // When it was revoked (steady clock, ns; 0 = live): read without the lock by a receiver
  // landing a part under it (Admission::revoked_for).
  std::atomic<int64_t> revoked_at_ns{0};
  std::function<void()> on_drained;
};

std::optional<uint64_t> MemoryRegistry::Admission::revoked_for(std::chrono::nanoseconds grace,
                                                               TimePoint at) const {
  const int64_t limit = (at - grace).time_since_epoch().count();
  for (const auto& g : grants_) {
    const int64_t revoked = g->revoked_at_ns.load(std::memory_order_relaxed);
    if (revoked != 0 && revoked <= limit) return g->id;
  }
  return std::nullopt;
}

void MemoryRegistry::set_require_grants(bool on) {
  MutexLock lock(mu_);
  require_grants_ = on;
}

bool MemoryRegistry::requires_grants() const {
  MutexLock lock(mu_);
  return require_grants_;
}

Status MemoryRegistry::add_grant(uint64_t id, WriteGrant grant) {
  if (id == 0) return invalid_argument("write grant: id 0 means 'no grant'");
  PDKV_RETURN_IF_ERROR(normalize_grant(grant));
  auto state = std::make_shared<Admission::GrantState>();
  state->id = id;
  state->grant = std::move(grant);
  // A grant opens registered memory only (admit() checks both again, since memory can be
  // unregistered while a grant lives).
  std::vector<DstRange> ranges;
  for_each_granted_range(state->grant, [&ranges](uint64_t addr, uint64_t length) {
    ranges.push_back({addr, length, 0});
  });
  MutexLock lock(mu_);
  for (const DstRange& r : ranges) {
    uint64_t bad = 0;
    if (!covered(r.addr, r.length, &bad)) {
      return invalid_argument(
          fmt::format("write grant: {}+{} is not in registered memory (first bad address {})",
                      hex(r.addr), r.length, hex(bad)));
    }
  }
  if (!grants_.emplace(id, std::move(state)).second) {
    return failed_precondition("write grant " + grant_tag(id) + " is already live");
  }
  return Status();
}

Status MemoryRegistry::revoke_grant(uint64_t id, std::function<void()> on_drained, GrantEnd end) {
  {
    MutexLock lock(mu_);
    auto it = grants_.find(id);
    if (it == grants_.end()) return not_found("write grant " + grant_tag(id) + " is not live");
    std::shared_ptr<Admission::GrantState> state = std::move(it->second);
    grants_.erase(it);
    if (end == GrantEnd::kCompleted && completed_.insert(id).second) {
      completed_order_.push_back(id);
      if (completed_order_.size() > kRememberedCompletedGrants) {
        completed_.erase(completed_order_.front());
        completed_order_.pop_front();
      }
    }
    state->revoked = true;
    state->revoked_at_ns.store(std::max<int64_t>(1, now().time_since_epoch().count()),
                               std::memory_order_relaxed);
    if (state->pins > 0) {
      state->on_drained = std::move(on_drained);
      return Status();
    }
  }
  if (on_drained) on_drained();
  return Status();
}

size_t MemoryRegistry::grant_count() const {
  MutexLock lock(mu_);
  return grants_.size();
}

bool MemoryRegistry::writable(uint64_t addr, uint64_t length, const Admission::GrantState* grant,
                              uint64_t* first_bad) const {
  if (!covered(addr, length, first_bad)) return false;
  return grant == nullptr || grant_covers(grant->grant, addr, length, first_bad);
}

bool MemoryRegistry::admits(const WriteRun& run, const Admission::GrantState* grant,
                            uint64_t* first_bad) const {
  if (run.pieces == 0) {
    *first_bad = run.addr;
    return false;
  }
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  if (run.stride != 0 && run.pieces - 1 > (max - run.addr) / run.stride) {
    *first_bad = run.addr;
    return false;
  }
  const uint64_t last = run.addr + (run.pieces - 1) * run.stride;
  if (last > max - run.length) {
    *first_bad = run.addr;
    return false;
  }
  // One pass over the whole span; a run crossing a gap is then checked piece by piece,
  // since only the bytes it writes must be registered and granted.
  if (writable(run.addr, last + run.length - run.addr, grant, first_bad)) return true;
  if (run.pieces == 1) return false;
  for (uint64_t k = 0; k < run.pieces; ++k) {
    if (!writable(run.addr + k * run.stride, run.length, grant, first_bad)) return false;
  }
  return true;
}

size_t MemoryRegistry::admit(std::span<const WriteRun> runs, Admission& admission,
                             uint64_t* first_bad, Refusal* why) const {
  admission.release();
  uint64_t bad = 0;
  MutexLock lock(mu_);
  auto& held = admission.grants_;
  held.clear();
  if (why != nullptr) *why = Refusal::kNotWritable;
  for (size_t i = 0; i < runs.size(); ++i) {
    const WriteRun& run = runs[i];
    const Admission::GrantState* grant = nullptr;
    if (run.grant != 0 || require_grants_) {
      // Runs of one grant come together: look each grant up once per stretch.
      if (!held.empty() && held.back()->id == run.grant) {
        grant = held.back().get();
      } else {
        auto it = grants_.find(run.grant);
        if (it == grants_.end()) {
          held.clear();
          if (first_bad != nullptr) *first_bad = run.addr;
          if (why != nullptr && completed_.contains(run.grant)) *why = Refusal::kGrantCompleted;
          return i;
        }
        held.push_back(it->second);
        grant = it->second.get();
      }
    }
    if (!admits(run, grant, &bad)) {
      held.clear();
      if (first_bad != nullptr) *first_bad = bad;
      return i;
    }
  }
  for (auto& g : held) ++g->pins;
  ++pins_[epoch_];
  admission.epoch_ = epoch_;
  admission.registry_ = this;
  return runs.size();
}

void MemoryRegistry::release(Admission& admission) const {
  std::vector<std::function<void()>> drained;
  {
    MutexLock lock(mu_);
    for (auto& g : admission.grants_) {
      if (--g->pins == 0 && g->revoked && g->on_drained)
        drained.push_back(std::move(g->on_drained));
    }
    auto it = pins_.find(admission.epoch_);
    if (it != pins_.end() && --it->second == 0) {
      pins_.erase(it);
      pins_cv_.notify_all();
    }
  }
  admission.grants_.clear();
  admission.registry_ = nullptr;
  for (auto& fn : drained) fn();
}

void MemoryRegistry::Admission::release() {
  if (registry_ != nullptr) registry_->release(*this);
  grants_.clear();
}

}  // namespace pdkv::engine
