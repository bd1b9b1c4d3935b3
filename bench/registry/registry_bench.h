// `pdkv bench registry`: how fast a decode learns of a prefill rank's birth and death,
// for the HTTP bootstrap registry and etcd (BENCHMARKS.md, "Route registry").
//
// Each round spawns a prefill rank as its own process (`pdkv bench registry --child`,
// which only publishes its route through the RouteDirectory and then sleeps), while the
// bench process acts as the decode: a RouteDirectory lookup waiting for the route, as the
// decode manager's resolver does. Measured on CLOCK_MONOTONIC, shared by both processes:
//   start -> seen:  the child's first instruction before publishing -> the lookup returns
//   death -> gone:  SIGKILL of the child -> the decode's view has no route any more
//                   (etcd: the watched mirror; http: GET /route answers 404, which it
//                   never does: the server keeps a dead rank's route until it is replaced)
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace pdkv::bench {

struct RegistryBenchArgs {
  std::string registry = "both";  // http, etcd or both
  int rounds = 10;
  int64_t ttl_s = 2;             // etcd lease TTL
  double http_stale_wait_s = 5;  // how long to wait for an HTTP route to vanish
  std::string etcd_endpoints;    // empty: start a one-member etcd for the run
  std::string json_path;
  // --child: be the prefill rank (internal).
  bool child = false;
  std::string child_addr;
  std::string child_prefix = "/pdkv-bench";
};

Status run_registry_bench(const RegistryBenchArgs& args);
int run_registry_bench_child(const RegistryBenchArgs& args);

}  // namespace pdkv::bench
