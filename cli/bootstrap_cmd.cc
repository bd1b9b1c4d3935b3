// `pdkv bootstrap --host H --port P [--secret-file F]`: a standalone bootstrap server until
// SIGTERM/SIGINT. With `--registry etcd --instance NAME` it serves NAME's routes from etcd
// instead (routes read-only; DP-rank routes and read authentication as the HTTP server).
//
// The signals are taken by the main thread (common/stop_signals.h). Prints "pdkv bootstrap
// listening on H:P" once bound (with --port 0 this tells a test or script the port).
#include <cstdio>
#include <string>

#include "bootstrap/server.h"
#include "cli/commands.h"
#include "common/cluster_key.h"
#include "common/logging.h"
#include "common/stop_signals.h"
#include "kv/registry/registry_http_server.h"

namespace pdkv::cli {
namespace {

using bootstrap::BootstrapServer;
using bootstrap::ServerOptions;

int run(ServerOptions options, const std::string& secret_file) {
  auto key = secret_file.empty() ? ClusterKey::from_env() : ClusterKey::from_file(secret_file);
  if (!key.ok()) {
    std::fprintf(stderr, "pdkv bootstrap: %s\n", key.status().to_string().c_str());
    return 2;
  }
  options.cluster_key = *key;
  // The server's own rule (BootstrapServer::start runs it too), checked here so that a
  // refused combination of flags is a usage error (2), not a failed start (1).
  if (Status usable = options.check(); !usable.ok()) {
    std::fprintf(stderr, "pdkv bootstrap: --authenticate-reads: %s\n", usable.message().c_str());
    return 2;
  }
  StopSignals signals;
  auto server = BootstrapServer::start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "pdkv bootstrap: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::printf("pdkv bootstrap listening on %s:%d\n", options.host.c_str(), (*server)->port());
  std::fflush(stdout);
  const int sig = signals.wait();
  PDKV_LOG_INFO("bootstrap: signal {}, shutting down", sig);
  (*server)->stop();
  return 0;
}

}  // namespace

void add_bootstrap_command(CLI::App& parent) {
  auto options = std::make_shared<ServerOptions>();
  auto secret_file = std::make_shared<std::string>();
  CLI::App* cmd = parent.add_subcommand("bootstrap", "Run a bootstrap (rendezvous) HTTP server");
  cmd->add_option("--host", options->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", options->port, "Port (0 = any free port, printed on start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", options->max_body_bytes, "Largest accepted request body")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--secret-file", *secret_file,
                  "Cluster secret (file, mode 600); default: PDKV_SECRET_FILE. With it, route "
                  "writes must be signed by a cluster member (with --registry etcd: only "
                  "signed entries are served)");
  cmd->add_flag("--authenticate-reads", options->authenticate_reads,
                "Require signed requests for route lookups too");
  // --registry etcd: serve, read-only, the routes of one instance kept in etcd
  // (kv/registry/registry_http_server.h; etcd settings from PDKV_ETCD_*).
  auto registry = std::make_shared<std::string>("http");
  auto instance = std::make_shared<std::string>();
  cmd->add_option("--registry", *registry, "Where routes live: http (this server) or etcd")
      ->check(CLI::IsMember({"http", "etcd"}))
      ->capture_default_str();
  cmd->add_option("--instance", *instance, "With --registry etcd: the prefill instance served");
  cmd->callback([options, secret_file, registry, instance] {
    if (*registry == "etcd") {
      if (instance->empty()) {
        std::fprintf(stderr, "pdkv bootstrap: --registry etcd needs --instance\n");
        return set_exit_code(2);
      }
      return set_exit_code(kv::run_registry_http_server(options->host, options->port, *instance,
                                                        *secret_file, options->authenticate_reads));
    }
    set_exit_code(run(*options, *secret_file));
  });
}

}  // namespace pdkv::cli
