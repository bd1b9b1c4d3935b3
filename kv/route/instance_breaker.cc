#include "kv/route/instance_breaker.h"

#include <algorithm>

namespace pdkv::kv {

std::optional<std::string> InstanceBreakers::refusal(const std::string& addr, TimePoint at) const {
  auto it = states_.find(addr);
  if (it == states_.end() || it->second.failures < policy_.failures_to_open) return std::nullopt;
  if (at >= it->second.open_until) return std::nullopt;  // the probe's turn
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(it->second.open_until - at);
  return "prefill instance " + addr + " is failing: its last " +
         std::to_string(it->second.failures) +
         " route lookups failed (the last: " + it->second.last_cause +
         "); rooms naming it fail at once for another " + std::to_string(left.count()) +
         " ms, then one lookup probes it again";
}

bool InstanceBreakers::failed(const std::string& addr, const std::string& cause, TimePoint at) {
  auto it = states_.find(addr);
  if (it == states_.end()) {
    if (states_.size() >= kMaxTrackedInstances) {
      // Forget the address failing longest ago: the newest failures matter most.
      auto oldest =
          std::min_element(states_.begin(), states_.end(), [](const auto& a, const auto& b) {
            return a.second.first_failure < b.second.first_failure;
          });
      states_.erase(oldest);
    }
    it = states_.emplace(addr, State{}).first;
    it->second.first_failure = at;
  }
  State& s = it->second;
  ++s.failures;
  s.last_cause = cause;
  if (s.failures < policy_.failures_to_open) return false;
  // Reached the threshold, or a probe failed: refuse for another period.
  s.open_until = at + policy_.open_for;
  return true;
}

}  // namespace pdkv::kv
