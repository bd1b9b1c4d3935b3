#include "kv/metrics/metrics_registry.h"

#include <algorithm>

namespace pdkv::kv {

MetricsRegistry::Registration::~Registration() { registry_->remove(id_); }

MetricsRegistry& MetricsRegistry::process() {
  // Leaked on purpose: managers may shut down during static destruction.
  static auto* registry = new MetricsRegistry();
  return *registry;
}

std::unique_ptr<MetricsRegistry::Registration> MetricsRegistry::add(Source source) {
  MutexLock lock(mu_);
  const uint64_t id = next_id_++;
  sources_.emplace_back(id, std::move(source));
  return std::unique_ptr<Registration>(new Registration(this, id));
}

void MetricsRegistry::remove(uint64_t id) {
  MutexLock lock(mu_);
  sources_.erase(std::remove_if(sources_.begin(), sources_.end(),
                                [id](const auto& s) { return s.first == id; }),
                 sources_.end());
}

std::string MetricsRegistry::render() const {
  PrometheusText out;
  MutexLock lock(mu_);
  for (const auto& [id, source] : sources_) source(out);
  return out.str();
}

size_t MetricsRegistry::size() const {
  MutexLock lock(mu_);
  return sources_.size();
}

}  // namespace pdkv::kv
