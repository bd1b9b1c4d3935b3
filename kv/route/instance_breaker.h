// InstanceBreakers: a circuit breaker per prefill instance address, for a decode's route
// resolution.
//
// The address a room names comes from the request, so a dead prefill host, a closed port
// or a bootstrap server that never answers must not cost every room that names it a whole
// bootstrap timeout (and a resolver held that long). Each lookup attempt is short
// (KvManagerOptions::route_attempt_timeout); after `failures_to_open` attempts in a row
// failed, the breaker opens: rooms naming that address fail at once with the last cause
// until `open_for` passed; then one lookup goes through as a probe (a decode resolves one
// instance's rooms one at a time, so there is exactly one), and its failure opens the
// breaker again, its success closes it.
//
// Bounded: at most kMaxTrackedInstances addresses are remembered (a caller naming ever new
// addresses makes the oldest be forgotten, which only costs them their count).
//
// Thread safety: none; the decode calls it under its own lock.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "common/clock.h"

namespace pdkv::kv {

struct BreakerPolicy {
  int failures_to_open = 3;
  std::chrono::milliseconds open_for{5000};
};

class InstanceBreakers {
 public:
  static constexpr size_t kMaxTrackedInstances = 4096;

  explicit InstanceBreakers(BreakerPolicy policy) : policy_(policy) {}

  // Why a room naming `addr` must fail now without a lookup; nullopt: look it up.
  std::optional<std::string> refusal(const std::string& addr, TimePoint at) const;
  // One lookup attempt failed with `cause`. True if that opened the breaker.
  bool failed(const std::string& addr, const std::string& cause, TimePoint at);
  void succeeded(const std::string& addr) { states_.erase(addr); }
  size_t tracked() const { return states_.size(); }

 private:
  struct State {
    int failures = 0;  // attempts in a row
    std::string last_cause;
    TimePoint open_until{};  // set once failures reached the threshold
    TimePoint first_failure{};
  };
  BreakerPolicy policy_;
  std::map<std::string, State> states_;
};

}  // namespace pdkv::kv
