#include "engine/engine_options.h"

#include "common/config.h"
#include "engine/engine_settings.h"

namespace pdkv::engine {

Result<EngineOptions> EngineOptions::from(const config::Settings& settings) {
  PDKV_ASSIGN_OR_RETURN(std::shared_ptr<const ClusterKey> key, ClusterKey::from(settings));
  return from(settings, std::move(key));
}

Result<EngineOptions> EngineOptions::from(const config::Settings& settings,
                                          std::shared_ptr<const ClusterKey> cluster_key) {
  EngineOptions o;
  o.settings = settings;
  PDKV_ASSIGN_OR_RETURN(o.backend, config::read<kEngineBackend>(settings));
  PDKV_ASSIGN_OR_RETURN(o.require_path, config::read<kEngineRequirePath>(settings));
  PDKV_ASSIGN_OR_RETURN(o.host, config::read<kEngineHost>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t port, config::read<kEnginePort>(settings));
  o.port = static_cast<int>(port);
  PDKV_ASSIGN_OR_RETURN(int64_t connect_ms, config::read<kEngineConnectTimeoutMs>(settings));
  o.connect_timeout_ms = static_cast<int>(connect_ms);
  PDKV_ASSIGN_OR_RETURN(int64_t streams, config::read<kTcpStreams>(settings));
  o.tcp.streams = static_cast<int>(streams);
  PDKV_ASSIGN_OR_RETURN(int64_t io_ms, config::read<kTcpIoTimeoutMs>(settings));
  o.tcp.io_timeout_ms = static_cast<int>(io_ms);
  PDKV_ASSIGN_OR_RETURN(int64_t sockbuf, config::read<kTcpSocketBufferBytes>(settings));
  o.tcp.socket_buffer_bytes = static_cast<int>(sockbuf);
  PDKV_ASSIGN_OR_RETURN(int64_t split, config::read<kTcpMinSplitBytes>(settings));
  o.tcp.min_split_bytes = static_cast<uint64_t>(split);
  PDKV_ASSIGN_OR_RETURN(int64_t entries, config::read<kTcpMaxPartEntries>(settings));
  o.tcp.max_part_entries = static_cast<uint32_t>(entries);
  PDKV_ASSIGN_OR_RETURN(int64_t stage, config::read<kTcpStageMaxBytes>(settings));
  o.tcp.stage_max_bytes = static_cast<uint64_t>(stage);
  PDKV_ASSIGN_OR_RETURN(int64_t recv_stage, config::read<kTcpRecvStageMaxBytes>(settings));
  o.tcp.recv_stage_max_bytes = static_cast<uint64_t>(recv_stage);
  PDKV_ASSIGN_OR_RETURN(int64_t inline_bytes, config::read<kTcpInlineWriteBytes>(settings));
  o.tcp.inline_write_max_bytes = static_cast<uint64_t>(inline_bytes);
  PDKV_ASSIGN_OR_RETURN(int64_t conns, config::read<kTcpMaxConnections>(settings));
  o.tcp.max_connections = static_cast<int>(conns);
  PDKV_ASSIGN_OR_RETURN(int64_t slabs, config::read<kTcpDeviceSlabs>(settings));
  o.tcp.device_slabs = static_cast<int>(slabs);
  PDKV_ASSIGN_OR_RETURN(int64_t slab_bytes, config::read<kTcpDeviceSlabBytes>(settings));
  o.tcp.device_slab_bytes = static_cast<uint64_t>(slab_bytes);
  o.cluster_key = std::move(cluster_key);
  return o;
}

}  // namespace pdkv::engine
