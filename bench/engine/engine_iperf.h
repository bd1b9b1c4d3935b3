// iperf3 loopback baseline for `pdkv bench engine` (P1/P1s, BENCHMARKS.md): runs Debian's
// iperf3 server (`iperf3 -s -1 -p PORT`) and client
// (`iperf3 -c 127.0.0.1 -p PORT -P streams -t seconds -J`) and reads the receiver-side
// throughput from the client's JSON (end.sum_received.bits_per_second).
//
// Thread safety: a free function; it loads the machine, so run nothing else meanwhile.
#pragma once

#include "common/status.h"

namespace pdkv::bench {

// GB/s (1e9 bytes per second). FailedPrecondition "iperf3 not found" if it is missing;
// Unavailable with iperf3's own error if the run fails.
Result<double> iperf3_loopback_gbps(int streams, int seconds);

}  // namespace pdkv::bench
