// Adds `pdkv chaos` (robustness/chaos/main.py): the fault-injection suite (R1-R4).
#include "cli/commands.h"
#include "cli/python_tool.h"

namespace pdkv::cli {

void add_chaos_command(CLI::App& parent) {
  add_python_tool(
      parent,
      {"chaos",
       "Fault injection: killed ranks, cut links, timeouts, hostile peers; checks each "
       "failure is reported within its bound and no other request is lost (R1-R4 in "
       "RELIABILITY.md); needs root for network namespaces",
       "robustness/chaos/main.py"});
}

}  // namespace pdkv::cli
