// MetricsRegistry: every live KV manager of this process, so that one Prometheus endpoint
// (kv/metrics/process_metrics_endpoint.h) or one prometheus_client collector (pdkv.metrics)
// serves them all: many ranks in one process share a port instead of fighting over one
// each. A manager adds itself when it starts and leaves when it shuts down.
//
// Thread safety: all methods may be called from any thread. render() calls the sources
// with the registry's lock held, and ~Registration takes that lock, so a source is never
// called after its Registration is gone: destroy the Registration before what the
// source reads (a source must not create or destroy Registrations itself).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "kv/metrics/prometheus_text.h"

namespace pdkv::kv {

class MetricsRegistry {
 public:
  using Source = std::function<void(PrometheusText&)>;

  // Unregisters its source on destruction (waiting for a render in progress).
  class Registration {
   public:
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    friend class MetricsRegistry;
    Registration(MetricsRegistry* registry, uint64_t id) : registry_(registry), id_(id) {}
    MetricsRegistry* registry_;
    uint64_t id_;
  };

  // The process's registry (never destroyed).
  static MetricsRegistry& process();

  std::unique_ptr<Registration> add(Source source) PDKV_EXCLUDES(mu_);
  // Every source's families, merged (one # HELP/# TYPE per family).
  std::string render() const PDKV_EXCLUDES(mu_);
  size_t size() const PDKV_EXCLUDES(mu_);

 private:
  void remove(uint64_t id) PDKV_EXCLUDES(mu_);

  mutable Mutex mu_;
  uint64_t next_id_ PDKV_GUARDED_BY(mu_) = 1;
  std::vector<std::pair<uint64_t, Source>> sources_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::kv
