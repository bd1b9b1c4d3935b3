// Registers `pdkv demo` (demo/main.py): the disaggregated tiny-model run, README command (1).
#include "tools/python_tool.h"

namespace {
const bool kDemoRegistered = pdkv::cli::register_python_tool(
    {"", "demo", "Tiny transformer: prefill and decode in separate processes, pdkv between them",
     "demo/main.py"});
}  // namespace
