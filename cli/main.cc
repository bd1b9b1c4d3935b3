// `pdkv`: the one command-line tool (bench, bootstrap, demo, chaos, ...).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/version_info.h"

int main(int argc, char** argv) {
  using namespace pdkv::cli;
  CLI::App app{"pdkv: KV-cache transfer for prefill/decode disaggregated serving"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text(),
                       "Print the pdkv version and its wire protocol versions, then exit");
  // Every sub-command, in the order --help lists them. A build that leaves bench/ or demo/
  // out (PDKV_LAYERS: the sanitizer builds) leaves their sub-commands out too
  // (cli/CMakeLists.txt).
  add_bootstrap_command(app);
#ifdef PDKV_CLI_WITH_BENCH
  CLI::App& bench = add_group(app, "bench",
                              "Benchmarks of KV transfer: engine throughput, end-to-end latency "
                              "and throughput, how fast routes appear and vanish; each prints a "
                              "table and writes --json (BENCHMARKS.md)");
  add_engine_bench_command(bench);
  add_e2e_bench_command(bench);
  add_registry_bench_command(bench);
  add_chaos_command(app);  // robustness/chaos: built with the benchmarks
#endif
#ifdef PDKV_CLI_WITH_DEMO
  add_demo_command(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code();
}
