#include "cli/commands.h"

namespace pdkv::cli {
namespace {

int g_exit_code = 0;

}  // namespace

CLI::App& add_group(CLI::App& parent, const std::string& name, const std::string& help) {
  CLI::App* group = parent.add_subcommand(name, help);
  group->require_subcommand(1);
  return *group;
}

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

}  // namespace pdkv::cli
