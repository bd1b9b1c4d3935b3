// `pdkv bootstrap --host H --port P`: a standalone bootstrap server until SIGTERM/SIGINT.
// With `--registry etcd --instance NAME` it serves NAME's routes from etcd instead.
//
// The signals are blocked before the server's threads exist (they inherit the mask) and
// the main thread takes them with sigwait, so shutdown runs in ordinary code instead of
// a signal handler. Prints "pdkv bootstrap listening on H:P" once bound (with --port 0
// this tells a test or script the port).
#include <signal.h>

#include <cstdio>

#include "bootstrap/server.h"
#include "common/logging.h"
#include "kv/registry/registry_http_server.h"
#include "tools/cli_registry.h"

namespace pdkv::bootstrap {
namespace {

int run(const ServerOptions& options) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto server = BootstrapServer::start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "pdkv bootstrap: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::printf("pdkv bootstrap listening on %s:%d\n", options.host.c_str(), (*server)->port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  PDKV_LOG_INFO("bootstrap: signal {}, shutting down", sig);
  (*server)->stop();
  return 0;
}

const cli::CommandRegistrar kRegistrar("", [](CLI::App& parent) {
  auto options = std::make_shared<ServerOptions>();
  CLI::App* cmd = parent.add_subcommand("bootstrap", "Run a bootstrap (rendezvous) HTTP server");
  cmd->add_option("--host", options->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", options->port, "Port (0 = any free port, printed on start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", options->max_body_bytes, "Largest accepted request body")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 20))
      ->capture_default_str();
  // --registry etcd: serve, read-only, the routes of one instance kept in etcd
  // (kv/registry/registry_http_server.h; etcd settings from PDKV_ETCD_*).
  auto registry = std::make_shared<std::string>("http");
  auto instance = std::make_shared<std::string>();
  cmd->add_option("--registry", *registry, "Where routes live: http (this server) or etcd")
      ->check(CLI::IsMember({"http", "etcd"}))
      ->capture_default_str();
  cmd->add_option("--instance", *instance, "With --registry etcd: the prefill instance served");
  cmd->callback([options, registry, instance] {
    if (*registry == "etcd") {
      if (instance->empty()) {
        std::fprintf(stderr, "pdkv bootstrap: --registry etcd needs --instance\n");
        return cli::set_exit_code(2);
      }
      return cli::set_exit_code(
          kv::run_registry_http_server(options->host, options->port, *instance));
    }
    cli::set_exit_code(run(*options));
  });
});

}  // namespace
}  // namespace pdkv::bootstrap
