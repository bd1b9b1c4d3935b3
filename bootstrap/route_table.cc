#include "bootstrap/route_table.h"

#include <fmt/format.h>

namespace pdkv::bootstrap {

Status RouteTable::register_rank(const PrefillRegistration& reg, bool* changed) {
  const InstanceLayout& l = reg.layout;
  int64_t p = l.tp_size_per_dp();
  std::pair<int64_t, int64_t> key{reg.engine_rank / p, reg.engine_rank % p};
  MutexLock lock(mu_);
  // Compare against the layout only if some *other* rank holds it: a lone rank that
  // restarts with a new configuration may replace its own registration.
  bool others = ranks_.size() > 1 || (ranks_.size() == 1 && !ranks_.count(key));
  if (layout_ && others) {
    std::string field = first_layout_difference(*layout_, l);
    if (!field.empty()) {
      return failed_precondition(fmt::format(
          "field '{}': engine_rank {} disagrees with the {} rank(s) already registered for "
          "this instance",
          field, reg.engine_rank, ranks_.size() - (ranks_.count(key) ? 1 : 0)));
    }
  }
  RankEndpoint endpoint{reg.engine_rank, key.second, reg.rank_ip, reg.rank_port};
  if (changed) {
    auto it = ranks_.find(key);
    *changed = !(layout_ && *layout_ == l && it != ranks_.end() && it->second == endpoint);
  }
  if (!others) ranks_.clear();  // a lone rank's old key may differ under a new layout
  layout_ = l;
  ranks_[key] = std::move(endpoint);
  return Status();
}

Status RouteTable::remove(int64_t dp_group, int64_t tp_rank) {
  MutexLock lock(mu_);
  if (ranks_.erase({dp_group, tp_rank}) == 0) {
    return not_found(
        fmt::format("no rank registered at dp group {} tp rank {}", dp_group, tp_rank));
  }
  if (ranks_.empty()) layout_.reset();
  return Status();
}

std::optional<InstanceLayout> RouteTable::layout() const {
  MutexLock lock(mu_);
  return layout_;
}

Status RouteTable::check_range(int64_t dp_group, int64_t tp_rank) const {
  if (!layout_) return not_found("no prefill rank has registered yet");
  if (dp_group < 0 || dp_group >= layout_->dp_size) {
    return out_of_range(
        fmt::format("target_dp_group {} is outside [0, {})", dp_group, layout_->dp_size));
  }
  if (tp_rank < -1 || tp_rank >= layout_->tp_size_per_dp()) {
    return out_of_range(
        fmt::format("engine_rank {} is outside [0, {})", tp_rank, layout_->tp_size_per_dp()));
  }
  return Status();
}

Result<RankEndpoint> RouteTable::lookup(int64_t dp_group, int64_t tp_rank) const {
  MutexLock lock(mu_);
  PDKV_RETURN_IF_ERROR(check_range(dp_group, tp_rank));
  auto it = ranks_.find({dp_group, tp_rank});
  if (it == ranks_.end()) {
    return not_found(
        fmt::format("prefill tp rank {} of dp group {} is not registered yet", tp_rank, dp_group));
  }
  return it->second;
}

Result<std::vector<RankEndpoint>> RouteTable::group(int64_t dp_group) const {
  MutexLock lock(mu_);
  PDKV_RETURN_IF_ERROR(check_range(dp_group, -1));
  std::vector<RankEndpoint> out;
  int64_t p = layout_->tp_size_per_dp();
  for (auto it = ranks_.lower_bound({dp_group, 0});
       it != ranks_.end() && it->first.first == dp_group; ++it) {
    out.push_back(it->second);
  }
  if (static_cast<int64_t>(out.size()) != p) {
    return not_found(
        fmt::format("dp group {}: {} of {} ranks registered", dp_group, out.size(), p));
  }
  return out;
}

size_t RouteTable::size() const {
  MutexLock lock(mu_);
  return ranks_.size();
}

}  // namespace pdkv::bootstrap
