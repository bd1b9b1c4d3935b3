// The `pdkv` command line: one binary, every sub-command's file in this folder. main.cc
// adds each sub-command explicitly, in the order `pdkv --help` lists them; the libraries a
// sub-command drives (bootstrap/, kv/, bench/, ...) never include anything from here.
//
// Each add_*_command creates its own sub-command under `parent` and installs a callback
// that calls set_exit_code(). All of it runs on the main thread.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace pdkv::cli {

// A group without an action of its own ("pdkv bench"): it requires one sub-command.
CLI::App& add_group(CLI::App& parent, const std::string& name, const std::string& help);

// `pdkv bootstrap` (bootstrap_cmd.cc): the rendezvous server, or etcd's routes read-only.
void add_bootstrap_command(CLI::App& parent);
// `pdkv bench engine` (engine_bench_cmd.cc over bench/engine/engine_bench.h).
void add_engine_bench_command(CLI::App& bench);
// `pdkv bench e2e` (e2e_cmd.cc): bench/e2e/main.py.
void add_e2e_bench_command(CLI::App& bench);
// `pdkv chaos` (chaos_cmd.cc): robustness/chaos/main.py.
void add_chaos_command(CLI::App& parent);
// `pdkv bench registry` (registry_bench_cmd.cc over bench/registry/registry_bench.h).
void add_registry_bench_command(CLI::App& bench);
// `pdkv demo` (demo_cmd.cc): demo/main.py.
void add_demo_command(CLI::App& parent);

void set_exit_code(int code);
int exit_code();

}  // namespace pdkv::cli
