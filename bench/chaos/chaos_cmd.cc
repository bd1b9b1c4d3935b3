// Registers `pdkv chaos` (bench/chaos/main.py): the fault-injection suite (R1-R4).
#include "tools/python_tool.h"

namespace {
const bool kChaosRegistered = pdkv::cli::register_python_tool(
    {"", "chaos",
     "Fault injection: killed ranks, cut links, timeouts, hostile peers; checks each "
     "failure is reported within its bound and no other request is lost (R1-R4 in "
     "RELIABILITY.md); needs root for network namespaces",
     "bench/chaos/main.py"});
}  // namespace
