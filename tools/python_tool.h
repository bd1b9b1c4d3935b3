// Sub-commands whose driver is a Python script (the end-to-end benchmark, the demo,
// the chaos suite): they orchestrate several processes through the `pdkv` package, so
// the CLI only hands over to Debian's interpreter with the build's package on its path.
#pragma once

#include <string>

namespace pdkv::cli {

struct PythonToolSpec {
  std::string parent;  // "" for `pdkv demo`, "bench" for `pdkv bench e2e`
  std::string name;
  std::string help;
  // Path relative to the source tree, e.g. "bench/e2e/main.py".
  std::string script;
};

// Registers a pass-through sub-command: every argument after its name (including
// --help) goes to the script, which parses its own options. Call from a static
// initialiser only (like CommandRegistrar).
bool register_python_tool(PythonToolSpec spec);

}  // namespace pdkv::cli
