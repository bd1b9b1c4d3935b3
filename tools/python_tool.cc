#include "tools/python_tool.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tools/cli_registry.h"

namespace pdkv::cli {
namespace {

// Baked in at configure time: the CLI is used from the build tree it was built in.
constexpr const char* kSourceDir = PDKV_SOURCE_DIR;
constexpr const char* kPythonDir = PDKV_PACKAGE_PARENT_DIR;
constexpr const char* kBinDir = PDKV_BUILD_BIN_DIR;
constexpr const char* kInterpreter = PDKV_PYTHON_EXECUTABLE;

void prepend_env_path(const char* var, const std::string& dir) {
  const char* old = std::getenv(var);
  std::string value = dir;
  if (old != nullptr && *old != '\0') value += std::string(":") + old;
  ::setenv(var, value.c_str(), 1);
}

// Replaces this process with the interpreter so signals, exit codes and the terminal
// (progress bars) behave exactly as if the script had been run directly.
int exec_script(const std::string& script, const std::vector<std::string>& args) {
  const std::string path = std::string(kSourceDir) + "/" + script;
  if (::access(path.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "pdkv: driver script %s is missing (%s)\n", path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  prepend_env_path("PYTHONPATH", kPythonDir);
  ::setenv("PDKV_BIN_DIR", kBinDir, 0);
  ::setenv("PDKV_PYTHON_DIR", kPythonDir, 0);
  std::vector<std::string> argv_storage{kInterpreter, path};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_storage.size() + 1);
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(kInterpreter, argv.data());
  std::fprintf(stderr, "pdkv: cannot run %s: %s\n", kInterpreter, std::strerror(errno));
  return 127;
}

}  // namespace

bool register_python_tool(PythonToolSpec spec) {
  auto shared = std::make_shared<PythonToolSpec>(std::move(spec));
  // The registrar only queues the builder; it need not outlive this call.
  CommandRegistrar(shared->parent, [shared](CLI::App& parent) {
    CLI::App* cmd = parent.add_subcommand(shared->name, shared->help + " (options: --help)");
    cmd->set_help_flag();  // --help belongs to the script
    cmd->allow_extras();
    cmd->prefix_command();
    cmd->callback([cmd, shared] { set_exit_code(exec_script(shared->script, cmd->remaining())); });
  });
  return true;
}

}  // namespace pdkv::cli
