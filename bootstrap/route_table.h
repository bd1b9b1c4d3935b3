// The bootstrap server's table of registered prefill ranks of one instance.
//
// Ranks are keyed by (dp_group, tp_rank) with dp_group = engine_rank / P and
// tp_rank = engine_rank % P, P = world_size / dp_size (as the reference stores them).
// The instance layout is the one every registered rank agrees on: a registration whose
// layout differs from another registered rank's is refused (kFailedPrecondition naming
// the field) and changes nothing; re-registering a rank replaces its entry.
//
// Thread safety: every method may be called concurrently (one internal mutex).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/registration.h"
#include "common/mutex.h"

namespace pdkv::bootstrap {

struct RankEndpoint {
  int64_t engine_rank = 0;
  int64_t tp_rank = 0;
  std::string rank_ip;
  int64_t rank_port = 0;
  bool operator==(const RankEndpoint&) const = default;
};

class RouteTable {
 public:
  // OK, or kFailedPrecondition when the layout conflicts with another registered rank.
  // `changed` (optional) tells whether the table differs afterwards: prefill ranks
  // register again periodically, and only a change is worth logging.
  Status register_rank(const PrefillRegistration& reg, bool* changed = nullptr) PDKV_EXCLUDES(mu_);
  // kNotFound if (dp_group, tp_rank) is not registered.
  Status remove(int64_t dp_group, int64_t tp_rank) PDKV_EXCLUDES(mu_);

  // nullopt until the first rank registers.
  std::optional<InstanceLayout> layout() const PDKV_EXCLUDES(mu_);
  // kNotFound while the rank is not registered; kOutOfRange outside the layout.
  Result<RankEndpoint> lookup(int64_t dp_group, int64_t tp_rank) const PDKV_EXCLUDES(mu_);
  // Every rank of the group, by tp_rank; kNotFound until all P are registered.
  Result<std::vector<RankEndpoint>> group(int64_t dp_group) const PDKV_EXCLUDES(mu_);
  size_t size() const PDKV_EXCLUDES(mu_);

 private:
  Status check_range(int64_t dp_group, int64_t tp_rank) const PDKV_REQUIRES(mu_);

  mutable Mutex mu_;
  std::optional<InstanceLayout> layout_ PDKV_GUARDED_BY(mu_);
  std::map<std::pair<int64_t, int64_t>, RankEndpoint> ranks_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::bootstrap
