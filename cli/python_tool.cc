#include "cli/python_tool.h"

#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace pdkv::cli {
namespace {

// Debian's interpreter, the one python3-numpy and the native modules are built for.
constexpr const char* kInterpreter = PDKV_PYTHON_EXECUTABLE;
// The install layout's package directory relative to the installed binary's directory
// (cmake/PdkvInstall.cmake: ../lib/python3/dist-packages by default).
constexpr const char* kInstalledPackageFromBin = PDKV_INSTALLED_PACKAGE_FROM_BIN;

void prepend_env_path(const char* var, const std::string& dir) {
  const char* old = std::getenv(var);
  std::string value = dir;
  if (old != nullptr && *old != '\0') value += std::string(":") + old;
  ::setenv(var, value.c_str(), 1);
}

// The directory of the running executable (symlinks resolved), "" if unknown.
std::string self_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

// Where the package may be, in order, for a binary in `bin_dir` (python_tool.h).
std::vector<std::string> package_parent_candidates(const std::string& bin_dir) {
  return {bin_dir + "/../python", bin_dir + "/" + kInstalledPackageFromBin, bin_dir + "/../.."};
}

bool readable(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

// Replaces this process with the interpreter so signals, exit codes and the terminal
// (progress bars) behave exactly as if the script had been run directly.
int exec_script(const std::string& script, const std::vector<std::string>& args) {
  const std::string bin_dir = self_dir();
  std::string parent, path;
  const std::vector<std::string> candidates = package_parent_candidates(bin_dir);
  for (const std::string& dir : candidates) {
    const std::string p = dir + "/pdkv/_tools/" + script;
    if (readable(dir + "/pdkv/__init__.py") && readable(p)) {
      parent = dir;
      path = p;
      break;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr,
                 "pdkv: cannot find the pdkv Python package with pdkv/_tools/%s; looked in:\n",
                 script.c_str());
    for (const std::string& dir : candidates) std::fprintf(stderr, "  %s\n", dir.c_str());
    return 1;
  }
  prepend_env_path("PYTHONPATH", parent);
  // The scripts start this same binary again (`pdkv bench engine`) and find the package.
  ::setenv("PDKV_BIN_DIR", bin_dir.c_str(), 1);
  ::setenv("PDKV_PYTHON_DIR", parent.c_str(), 1);
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

void add_python_tool(CLI::App& parent, PythonToolSpec spec) {
  CLI::App* cmd = parent.add_subcommand(spec.name, spec.help);
  cmd->set_help_flag();  // --help belongs to the script: it prints the real options
  cmd->allow_extras();
  cmd->prefix_command();
  cmd->callback([cmd, script = std::move(spec.script)] {
    set_exit_code(exec_script(script, cmd->remaining()));
  });
}

}  // namespace pdkv::cli
