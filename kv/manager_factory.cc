#include "kv/manager_factory.h"

#include <utility>

#include "engine/backend.h"
#include "kv/control/zmq_control_channel.h"

namespace pdkv::kv {

Result<ManagerSettings> ManagerSettings::from(const config::Settings& settings) {
  ManagerSettings s;
  PDKV_ASSIGN_OR_RETURN(s.options, KvManagerOptions::from(settings));
  PDKV_ASSIGN_OR_RETURN(s.cluster_key, ClusterKey::from(settings));
  PDKV_ASSIGN_OR_RETURN(s.engine, engine::EngineOptions::from(settings, s.cluster_key));
  PDKV_RETURN_IF_ERROR(engine::check_backend_settings(settings));
  PDKV_ASSIGN_OR_RETURN(s.endpoint, proto::EndpointOptions::from(settings, s.cluster_key));
  PDKV_ASSIGN_OR_RETURN(s.registry, RegistryOptions::from(settings));
  if (!s.options.local_ip.empty()) s.engine.host = s.options.local_ip;
  return s;
}

Result<ManagerFactory> ManagerFactory::create(const config::Settings& settings) {
  PDKV_ASSIGN_OR_RETURN(ManagerSettings s, ManagerSettings::from(settings));
  PDKV_ASSIGN_OR_RETURN(std::shared_ptr<RouteDirectory> directory,
                        make_route_directory(s.registry, s.cluster_key));
  ControlChannelFactory channels = zmq_channel_factory(s.endpoint);
  return ManagerFactory(std::move(s), std::move(channels), std::move(directory));
}

ManagerFactory::ManagerFactory(ManagerSettings settings, ControlChannelFactory channels,
                               std::shared_ptr<RouteDirectory> directory)
    : settings_(std::move(settings)),
      channels_(std::move(channels)),
      directory_(std::move(directory)) {}

Result<std::unique_ptr<PrefillManager>> ManagerFactory::prefill(ManagerSpec spec) const {
  return PrefillManager::create(manager_config<PrefillManagerConfig>(std::move(spec), settings_),
                                channels_, directory_);
}

Result<std::unique_ptr<DecodeManager>> ManagerFactory::decode(ManagerSpec spec) const {
  return DecodeManager::create(manager_config<DecodeManagerConfig>(std::move(spec), settings_),
                               channels_, directory_);
}

}  // namespace pdkv::kv
