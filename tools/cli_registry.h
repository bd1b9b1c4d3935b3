// The `pdkv` command line is one binary whose sub-commands live next to the code they
// drive (bench/, bootstrap/, ...). Each sub-command file defines a static
// CommandRegistrar; tools/main.cc builds the CLI11 tree from all of them.
//
// Registration happens during static initialisation (single-threaded); run-time use is
// from the main thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace pdkv::cli {

// `parent` is the space-separated path of the parent command: "" for a top-level
// command ("pdkv demo"), "bench" for "pdkv bench engine". `add` must create its own
// sub-command on the given parent and install a callback that calls set_exit_code().
class CommandRegistrar {
 public:
  using AddFn = std::function<void(CLI::App& parent)>;
  CommandRegistrar(std::string parent, AddFn add);
};

// Groups without their own action ("bench") are created on demand with this help text.
void describe_group(const std::string& path, const std::string& help);

void set_exit_code(int code);
int exit_code();

// Builds the full command tree under `root` (called once by main).
void build_command_tree(CLI::App& root);

}  // namespace pdkv::cli
