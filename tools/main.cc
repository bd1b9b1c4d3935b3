// `pdkv`: the one command-line tool (bench, bootstrap, demo, chaos, ...).
#include <CLI/CLI.hpp>

#include "tools/cli_registry.h"
#include "tools/version_info.h"

int main(int argc, char** argv) {
  CLI::App app{"pdkv: KV-cache transfer for prefill/decode disaggregated serving"};
  app.require_subcommand(1);
  app.set_version_flag("--version", pdkv::cli::version_text(),
                       "Print the pdkv version and its wire protocol versions, then exit");
  pdkv::cli::build_command_tree(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return pdkv::cli::exit_code();
}
