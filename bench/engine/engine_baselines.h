// Baselines for the shm and UCX engine benchmarks (P2, P3), measured in the same run as
// the figure they divide: the machine is shared and noisy, so only a same-run ratio means
// anything.
//
//  * memcpy_baseline_gbps: one thread memcpy'ing the workload's blocks (same sizes, same
//    shuffled destinations) from one buffer into another, both pre-faulted: the P2 baseline.
//  * ucx_perftest_put_bw_gbps: runs Debian's `ucx_perftest -t ucp_put_bw` (server and
//    client over loopback, UCX_TLS=tls) with the workload's message size: the P3 baseline.
//    Note it re-puts one message buffer, so it measures cache-resident copies on shared
//    memory transports; BENCHMARKS.md discusses what that means for the ratio.
//
// Thread safety: free functions; run one at a time (they load the machine).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace pdkv::bench {

// GB/s = 1e9 bytes per second. Median of `runs` passes.
Result<double> memcpy_baseline_gbps(uint64_t block_bytes, uint64_t total_bytes, int runs = 3);

// Unavailable if ucx_perftest is missing or fails (message includes its output tail).
Result<double> ucx_perftest_put_bw_gbps(const std::string& tls, uint64_t message_bytes,
                                        uint64_t iterations, int port);

// The baseline `pdkv bench engine --backend B` divides by: tcp -> iperf3 (same streams),
// shm -> memcpy_baseline_gbps, ucx -> ucx_perftest with UCX_TLS = ucx_tls (or the
// environment's UCX_TLS, else "tcp") and the workload's block size as message size.
struct BackendBaseline {
  Result<double> gbps = internal_error("not measured");
  std::string kind;  // human text for the table and JSON "baseline_kind"
};
BackendBaseline measure_backend_baseline(const std::string& backend, const std::string& ucx_tls,
                                         uint64_t block_bytes, uint64_t payload_bytes, int streams,
                                         int iperf_seconds);

// The `kind` text measure_backend_baseline() would report, without measuring.
std::string backend_baseline_kind(const std::string& backend, const std::string& ucx_tls,
                                  uint64_t block_bytes);

// UCX transports the ucx benchmark runs with ("tcp" when nothing is set), and the JSON
// key suffix for them ("posix,sysv" -> "posix_sysv").
std::string effective_ucx_tls(const std::string& ucx_tls);
std::string tls_key(const std::string& tls);

}  // namespace pdkv::bench
