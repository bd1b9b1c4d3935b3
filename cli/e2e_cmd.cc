// Adds `pdkv bench e2e` (bench/e2e/main.py): P5, P6, P7, P8, P12 over real processes.
#include "cli/commands.h"
#include "cli/python_tool.h"

namespace pdkv::cli {

void add_e2e_bench_command(CLI::App& bench) {
  add_python_tool(
      bench, {"e2e",
              "End to end over real bootstrap, prefill and decode processes: a request's latency, "
              "throughput of 1024 concurrent requests (plain, or hybrid rooms with --model "
              "qwen3-next|gpt-oss|deepseek-v32), layer-by-layer streaming, a soak of mixed "
              "arrivals (P5-P8, P12 in BENCHMARKS.md)",
              "bench/e2e/main.py"});
}

}  // namespace pdkv::cli
