#include "engine/engine_options.h"

#include "common/config.h"

namespace pdkv::engine {

Result<EngineOptions> EngineOptions::from(const config::Settings& settings) {
  PDKV_ASSIGN_OR_RETURN(std::shared_ptr<const ClusterKey> key, ClusterKey::from(settings));
  return from(settings, std::move(key));
}

Result<EngineOptions> EngineOptions::from(const config::Settings& settings,
                                          std::shared_ptr<const ClusterKey> cluster_key) {
  EngineOptions o;
  o.settings = settings;
  PDKV_ASSIGN_OR_RETURN(o.backend, config::read_string(settings, "PDKV_ENGINE_BACKEND", o.backend,
                                                       {"tcp", "shm", "ucx"}));
  PDKV_ASSIGN_OR_RETURN(o.host, config::read_string(settings, "PDKV_ENGINE_HOST", o.host));
  PDKV_ASSIGN_OR_RETURN(int64_t port,
                        config::read_int(settings, "PDKV_ENGINE_PORT", o.port, 0, 65535));
  o.port = static_cast<int>(port);
  PDKV_ASSIGN_OR_RETURN(int64_t connect_ms,
                        config::read_int(settings, "PDKV_ENGINE_CONNECT_TIMEOUT_MS",
                                         o.connect_timeout_ms, 1, 600000));
  o.connect_timeout_ms = static_cast<int>(connect_ms);
  PDKV_ASSIGN_OR_RETURN(int64_t streams,
                        config::read_int(settings, "PDKV_TCP_STREAMS", o.tcp.streams, 1, 64));
  o.tcp.streams = static_cast<int>(streams);
  PDKV_ASSIGN_OR_RETURN(int64_t io_ms, config::read_int(settings, "PDKV_TCP_IO_TIMEOUT_MS",
                                                        o.tcp.io_timeout_ms, 10, 3600000));
  o.tcp.io_timeout_ms = static_cast<int>(io_ms);
  PDKV_ASSIGN_OR_RETURN(int64_t sockbuf, config::read_int(settings, "PDKV_TCP_SOCKET_BUFFER_BYTES",
                                                          o.tcp.socket_buffer_bytes, 0, 1 << 30));
  o.tcp.socket_buffer_bytes = static_cast<int>(sockbuf);
  PDKV_ASSIGN_OR_RETURN(int64_t split, config::read_int(settings, "PDKV_TCP_MIN_SPLIT_BYTES",
                                                        static_cast<int64_t>(o.tcp.min_split_bytes),
                                                        4096, int64_t{1} << 40));
  o.tcp.min_split_bytes = static_cast<uint64_t>(split);
  PDKV_ASSIGN_OR_RETURN(int64_t entries, config::read_int(settings, "PDKV_TCP_MAX_PART_ENTRIES",
                                                          o.tcp.max_part_entries, 1, 1 << 24));
  o.tcp.max_part_entries = static_cast<uint32_t>(entries);
  PDKV_ASSIGN_OR_RETURN(int64_t stage, config::read_int(settings, "PDKV_TCP_STAGE_MAX_BYTES",
                                                        static_cast<int64_t>(o.tcp.stage_max_bytes),
                                                        0, int64_t{1} << 20));
  o.tcp.stage_max_bytes = static_cast<uint64_t>(stage);
  PDKV_ASSIGN_OR_RETURN(
      int64_t inline_bytes,
      config::read_int(settings, "PDKV_TCP_INLINE_WRITE_BYTES",
                       static_cast<int64_t>(o.tcp.inline_write_max_bytes), 0, int64_t{16} << 20));
  o.tcp.inline_write_max_bytes = static_cast<uint64_t>(inline_bytes);
  PDKV_ASSIGN_OR_RETURN(int64_t conns, config::read_int(settings, "PDKV_TCP_MAX_CONNECTIONS",
                                                        o.tcp.max_connections, 1, 65536));
  o.tcp.max_connections = static_cast<int>(conns);
  PDKV_ASSIGN_OR_RETURN(int64_t slabs, config::read_int(settings, "PDKV_TCP_DEVICE_SLABS",
                                                        o.tcp.device_slabs, 1, 64));
  o.tcp.device_slabs = static_cast<int>(slabs);
  PDKV_ASSIGN_OR_RETURN(
      int64_t slab_bytes,
      config::read_int(settings, "PDKV_TCP_DEVICE_SLAB_BYTES",
                       static_cast<int64_t>(o.tcp.device_slab_bytes), 64 << 10, int64_t{1} << 30));
  o.tcp.device_slab_bytes = static_cast<uint64_t>(slab_bytes);
  o.cluster_key = std::move(cluster_key);
  return o;
}

}  // namespace pdkv::engine
