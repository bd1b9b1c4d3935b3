// Adds `pdkv bench registry` (bench/registry/registry_bench.h).
#include <cstdio>

#include "bench/registry/registry_bench.h"
#include "cli/commands.h"

namespace pdkv::cli {

void add_registry_bench_command(CLI::App& bench) {
  auto args = std::make_shared<pdkv::bench::RegistryBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "registry",
      "Route registry: prefill rank start -> decode sees it, death -> route gone "
      "(http vs etcd; BENCHMARKS.md)");
  cmd->add_option("--registry", args->registry, "http, etcd or both")
      ->check(CLI::IsMember({"http", "etcd", "both"}))
      ->capture_default_str();
  cmd->add_option("--rounds", args->rounds, "prefill ranks started and killed per registry")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--ttl", args->ttl_s, "etcd lease TTL in seconds (PDKV_ETCD_LEASE_TTL_S)")
      ->check(CLI::Range(2, 3600))
      ->capture_default_str();
  cmd->add_option("--http-stale-wait", args->http_stale_wait_s,
                  "seconds to wait for a dead rank's HTTP route to vanish")
      ->capture_default_str();
  cmd->add_option("--etcd-endpoints", args->etcd_endpoints,
                  "use this etcd (host:port,...) instead of starting one");
  cmd->add_option("--json", args->json_path, "write the figures as JSON to this file");
  // Internal: the prefill rank process of one round.
  cmd->add_flag("--child", args->child)->group("");
  cmd->add_option("--child-addr", args->child_addr)->group("");
  cmd->add_option("--child-prefix", args->child_prefix)->group("");
  cmd->callback([args] {
    if (args->child) return pdkv::cli::set_exit_code(pdkv::bench::run_registry_bench_child(*args));
    pdkv::Status st = pdkv::bench::run_registry_bench(*args);
    if (!st.ok()) {
      std::fprintf(stderr, "pdkv bench registry: %s\n", st.to_string().c_str());
      pdkv::cli::set_exit_code(1);
    }
  });
}

}  // namespace pdkv::cli
