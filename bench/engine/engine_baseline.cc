#include <algorithm>
#include <cstdlib>

#include "bench/engine/engine_baselines.h"
#include "bench/engine/engine_iperf.h"

namespace pdkv::bench {

std::string effective_ucx_tls(const std::string& ucx_tls) {
  if (!ucx_tls.empty()) return ucx_tls;
  const char* env = std::getenv("PDKV_UCX_TLS");
  if (env != nullptr && *env != '\0') return env;
  env = std::getenv("UCX_TLS");
  return env != nullptr && *env != '\0' ? env : "tcp";
}

std::string tls_key(const std::string& tls) {
  std::string k = tls;
  std::replace(k.begin(), k.end(), ',', '_');
  return k;
}

std::string backend_baseline_kind(const std::string& backend, const std::string& ucx_tls,
                                  uint64_t block_bytes) {
  if (backend == "shm") {
    return "single-thread memcpy into pre-faulted memory, same blocks and shuffled pages";
  }
  if (backend == "ucx") {
    return "ucx_perftest -t ucp_put_bw -s " + std::to_string(block_bytes) +
           ", UCX_TLS=" + effective_ucx_tls(ucx_tls);
  }
  return "iperf3 loopback, same stream count";
}

BackendBaseline measure_backend_baseline(const std::string& backend, const std::string& ucx_tls,
                                         uint64_t block_bytes, uint64_t payload_bytes, int streams,
                                         int iperf_seconds) {
  BackendBaseline b;
  b.kind = backend_baseline_kind(backend, ucx_tls, block_bytes);
  if (backend == "shm") {
    b.gbps = memcpy_baseline_gbps(block_bytes, payload_bytes);
  } else if (backend == "ucx") {
    const std::string tls = effective_ucx_tls(ucx_tls);
    // About twice the workload's bytes, at least 10k messages, so the run is not all warm-up.
    uint64_t iters =
        std::max<uint64_t>(10000, 2 * payload_bytes / std::max<uint64_t>(1, block_bytes));
    b.gbps = ucx_perftest_put_bw_gbps(tls, block_bytes, iters, 13400 + (std::rand() % 500));
  } else {
    b.gbps = iperf3_loopback_gbps(streams, iperf_seconds);
  }
  return b;
}

}  // namespace pdkv::bench
