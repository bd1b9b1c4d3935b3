// Sub-commands whose driver is a Python script (the end-to-end benchmark, the demo,
// the chaos suite): they orchestrate several processes through the `pdkv` package, so
// the CLI only hands over to Debian's interpreter with that package on its path.
//
// The scripts ship inside the package, at pdkv/_tools/<script> (cmake/PdkvDrivers.cmake),
// and the package is found relative to the running binary, never through a path baked in
// at build time, so the same binary works from the build tree, an install prefix, the .deb
// and the wheel:
//   <bin>/../python                 build tree        build/bin/pdkv
//   <bin>/../<install python dir>   cmake --install   P/bin/pdkv, P/lib/python3/dist-packages
//   <bin>/../..                     wheel             site-packages/pdkv/_bin/pdkv
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace pdkv::cli {

struct PythonToolSpec {
  std::string name;  // "demo", "e2e" (under `pdkv bench`)
  std::string help;
  // Path under pdkv/_tools (the script's path in the source tree), e.g. "bench/e2e/main.py".
  std::string script;
};

// Adds a pass-through sub-command under `parent`: every argument after its name (including
// --help, which the script answers with its real options) goes to the script.
void add_python_tool(CLI::App& parent, PythonToolSpec spec);

}  // namespace pdkv::cli
