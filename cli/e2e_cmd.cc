// Adds `pdkv bench e2e` (bench/e2e/main.py): P5, P6, P7, P8 over real processes.
#include "cli/commands.h"
#include "cli/python_tool.h"

namespace pdkv::cli {

void add_e2e_bench_command(CLI::App& bench) {
  add_python_tool(
      bench,
      {"e2e",
       "End-to-end: bootstrap, prefill and decode processes over loopback (P5 latency, P6 scale, "
       "P7 layerwise, P8 soak)",
       "bench/e2e/main.py"});
}

}  // namespace pdkv::cli
