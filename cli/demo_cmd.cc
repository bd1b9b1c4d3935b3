// Adds `pdkv demo` (demo/main.py): the disaggregated tiny-model run, README command (1).
#include "cli/commands.h"
#include "cli/python_tool.h"

namespace pdkv::cli {

void add_demo_command(CLI::App& parent) {
  add_python_tool(
      parent, {"demo", "Tiny models: prefill and decode in separate processes, pdkv between them",
               "demo/main.py"});
}

}  // namespace pdkv::cli
