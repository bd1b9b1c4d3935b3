// ManagerFactory: the one place that turns settings (pdkv.Config's values, then the
// environment) into a running prefill or decode manager. The Python binding, the tests'
// ManagerMaker and anything else that starts a manager go through it, so a manager is
// assembled the same way everywhere: the settings read and checked once, the cluster
// secret file read once and the same key given to the engine, the control channel and the
// route directory (a second read could see a different file, and costs a disk read per
// manager).
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "common/cluster_key.h"
#include "common/config.h"
#include "common/status.h"
#include "engine/engine_options.h"
#include "kv/control/control_channel.h"
#include "kv/decode/decode_manager.h"
#include "kv/kv_args.h"
#include "kv/manager_options.h"
#include "kv/prefill/prefill_manager.h"
#include "kv/registry/registry_options.h"
#include "kv/route/route_directory.h"
#include "proto/zmq_endpoint_options.h"

namespace pdkv::kv {

// Every option struct a manager runs with, read from one config::Settings.
struct ManagerSettings {
  KvManagerOptions options;
  engine::EngineOptions engine;
  proto::EndpointOptions endpoint;
  RegistryOptions registry;
  std::shared_ptr<const ClusterKey> cluster_key;  // null: no cluster secret

  // kInvalidArgument naming the variable for a value that does not parse or is out of
  // range (or a backend not built in); the secret file's own errors as ClusterKey says.
  // PDKV_LOCAL_IP, when set, is the address the engine listens on and advertises.
  static Result<ManagerSettings> from(const config::Settings& settings);
};

// What a manager is beyond its settings: the rank's buffers and its place in the cluster.
struct ManagerSpec {
  KvArgs args;
  std::string bootstrap_addr;  // "host:port"; a decode's default for receivers naming none
  bool enable_mla_l1_5_cache = false;
  // Prefill only (a decode ignores them, as the engines pass one set of arguments to both):
  int64_t layerwise_interval = 0;  // > 0: stream layer groups as the forward marks them
  bool wait_for_prefill_metadata = false;
};

// The one mapping between a spec with its settings and a manager's own config struct
// (PrefillManagerConfig or DecodeManagerConfig), both ways; a decode has no prefill-only
// fields.
template <typename Config>
Config manager_config(ManagerSpec spec, const ManagerSettings& settings) {
  Config config;
  config.args = std::move(spec.args);
  config.bootstrap_addr = std::move(spec.bootstrap_addr);
  config.enable_mla_l1_5_cache = spec.enable_mla_l1_5_cache;
  if constexpr (std::is_same_v<Config, PrefillManagerConfig>) {
    config.layerwise_interval = spec.layerwise_interval;
    config.wait_for_prefill_metadata = spec.wait_for_prefill_metadata;
  }
  config.engine = settings.engine;
  config.options = settings.options;
  return config;
}

template <typename Config>
ManagerSpec manager_spec(Config config) {
  ManagerSpec spec;
  spec.args = std::move(config.args);
  spec.bootstrap_addr = std::move(config.bootstrap_addr);
  spec.enable_mla_l1_5_cache = config.enable_mla_l1_5_cache;
  if constexpr (std::is_same_v<Config, PrefillManagerConfig>) {
    spec.layerwise_interval = config.layerwise_interval;
    spec.wait_for_prefill_metadata = config.wait_for_prefill_metadata;
  }
  return spec;
}

class ManagerFactory {
 public:
  // Production: the settings read once, ZeroMQ control channels, and the route directory
  // PDKV_REGISTRY names (the bootstrap server's, or etcd's), all with the one key.
  static Result<ManagerFactory> create(const config::Settings& settings);
  // Given parts: the tests' in-process bus and memory directory, for example.
  ManagerFactory(ManagerSettings settings, ControlChannelFactory channels,
                 std::shared_ptr<RouteDirectory> directory);

  Result<std::unique_ptr<PrefillManager>> prefill(ManagerSpec spec) const;
  Result<std::unique_ptr<DecodeManager>> decode(ManagerSpec spec) const;

  const ManagerSettings& settings() const { return settings_; }

 private:
  ManagerSettings settings_;
  ControlChannelFactory channels_;
  std::shared_ptr<RouteDirectory> directory_;
};

}  // namespace pdkv::kv
