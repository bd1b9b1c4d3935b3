// Adds `pdkv chaos` (bench/chaos/main.py): the fault-injection suite (R1-R4).
#include "cli/commands.h"
#include "cli/python_tool.h"

namespace pdkv::cli {

void add_chaos_command(CLI::App& parent) {
  add_python_tool(
      parent,
      {"chaos",
       "Fault injection over network namespaces and a syscall shim (R1-R4); needs root for netns",
       "bench/chaos/main.py"});
}

}  // namespace pdkv::cli
