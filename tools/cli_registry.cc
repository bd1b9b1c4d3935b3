#include "tools/cli_registry.h"

#include <map>
#include <sstream>
#include <vector>

namespace pdkv::cli {
namespace {

struct Pending {
  std::string parent;
  CommandRegistrar::AddFn add;
};

// Function-local statics: registrars in other translation units may run first.
std::vector<Pending>& pending() {
  static std::vector<Pending> all;
  return all;
}
std::map<std::string, std::string>& group_help() {
  static std::map<std::string, std::string> help{
      {"bench",
       "Benchmarks of KV transfer: engine throughput, end-to-end latency and throughput, "
       "how fast routes appear and vanish; each prints a table and writes --json "
       "(BENCHMARKS.md)"}};
  return help;
}
int g_exit_code = 0;

CLI::App& find_or_create(CLI::App& root, const std::string& path) {
  CLI::App* node = &root;
  std::istringstream words(path);
  std::string word, so_far;
  while (words >> word) {
    so_far += so_far.empty() ? word : " " + word;
    CLI::App* child = nullptr;
    for (CLI::App* sub : node->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->get_name() == word) child = sub;
    }
    if (child == nullptr) {
      child = node->add_subcommand(word, group_help()[so_far]);
      child->require_subcommand(1);
    }
    node = child;
  }
  return *node;
}

}  // namespace

CommandRegistrar::CommandRegistrar(std::string parent, AddFn add) {
  pending().push_back(Pending{std::move(parent), std::move(add)});
}

void describe_group(const std::string& path, const std::string& help) { group_help()[path] = help; }

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

void build_command_tree(CLI::App& root) {
  for (auto& p : pending()) p.add(find_or_create(root, p.parent));
}

}  // namespace pdkv::cli
