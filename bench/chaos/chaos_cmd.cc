// Registers `pdkv chaos` (bench/chaos/main.py): the fault-injection suite (R1-R4).
#include "tools/python_tool.h"

namespace {
const bool kChaosRegistered = pdkv::cli::register_python_tool(
    {"", "chaos",
     "Fault injection over network namespaces and a syscall shim (R1-R4); needs root for netns",
     "bench/chaos/main.py"});
}  // namespace
