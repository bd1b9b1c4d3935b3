#include "kv/manager_options.h"

#include <cmath>

#include "common/config.h"
#include "common/host_name.h"

namespace pdkv::kv {
namespace {

std::chrono::milliseconds seconds_to_ms(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000.0)));
}

}  // namespace

Result<KvManagerOptions> KvManagerOptions::from(const config::Settings& settings) {
  KvManagerOptions o;
  PDKV_ASSIGN_OR_RETURN(
      double bootstrap_s,
      config::read_double(settings, "PDKV_BOOTSTRAP_TIMEOUT_S", 120.0, 0.1, 86400.0));
  PDKV_ASSIGN_OR_RETURN(double waiting_s, config::read_double(settings, "PDKV_WAITING_TIMEOUT_S",
                                                              300.0, 0.1, 86400.0));
  PDKV_ASSIGN_OR_RETURN(double metadata_s, config::read_double(settings, "PDKV_METADATA_TIMEOUT_S",
                                                               10.0, 0.01, 3600.0));
  PDKV_ASSIGN_OR_RETURN(
      double heartbeat_s,
      config::read_double(settings, "PDKV_HEARTBEAT_INTERVAL_S", 0.5, 0.05, 60.0));
  PDKV_ASSIGN_OR_RETURN(int64_t max_failures,
                        config::read_int(settings, "PDKV_HEARTBEAT_MAX_FAILURES", 3, 1, 100));
  PDKV_ASSIGN_OR_RETURN(double ttl_s,
                        config::read_double(settings, "PDKV_FAILED_PEER_TTL_S", 30.0, 0.0, 3600.0));
  PDKV_ASSIGN_OR_RETURN(
      double cooldown_s,
      config::read_double(settings, "PDKV_FAILED_PEER_COOLDOWN_S", 1.0, 0.001, 3600.0));
  PDKV_ASSIGN_OR_RETURN(int64_t attempts,
                        config::read_int(settings, "PDKV_TRANSFER_ATTEMPTS", 3, 1, 10));
  PDKV_ASSIGN_OR_RETURN(double refresh_s, config::read_double(settings, "PDKV_BOOTSTRAP_REFRESH_S",
                                                              2.0, 0.0, 3600.0));
  PDKV_ASSIGN_OR_RETURN(int64_t window,
                        config::read_int(settings, "PDKV_TRANSFER_WINDOW_BYTES", int64_t{64} << 20,
                                         int64_t{1} << 16, int64_t{1} << 40));
  PDKV_ASSIGN_OR_RETURN(int64_t batch,
                        config::read_int(settings, "PDKV_TRANSFER_BATCH_BYTES", int64_t{4} << 20,
                                         int64_t{4} << 10, int64_t{1} << 32));
  PDKV_ASSIGN_OR_RETURN(bool checksum, config::read_bool(settings, "PDKV_VERIFY_CHECKSUM", false));
  PDKV_ASSIGN_OR_RETURN(bool in_band, config::read_bool(settings, "PDKV_STATUS_IN_BAND", true));
  PDKV_ASSIGN_OR_RETURN(int64_t max_peers,
                        config::read_int(settings, "PDKV_MAX_DECODE_PEERS", 4096, 1, 1 << 20));
  PDKV_ASSIGN_OR_RETURN(int64_t max_pending, config::read_int(settings, "PDKV_MAX_PENDING_ROOMS",
                                                              65536, 1, int64_t{1} << 24));
  PDKV_ASSIGN_OR_RETURN(
      int64_t pending_per_decode,
      config::read_int(settings, "PDKV_MAX_PENDING_ROOMS_PER_DECODE", 8192, 1, int64_t{1} << 24));
  PDKV_ASSIGN_OR_RETURN(int64_t pending_bytes,
                        config::read_int(settings, "PDKV_MAX_PENDING_BYTES_PER_DECODE",
                                         int64_t{1} << 28, int64_t{1} << 16, int64_t{1} << 40));
  PDKV_ASSIGN_OR_RETURN(std::string local_ip, config::read_string(settings, "PDKV_LOCAL_IP", ""));
  PDKV_ASSIGN_OR_RETURN(int64_t metrics_port,
                        config::read_int(settings, "PDKV_METRICS_PORT", -1, -1, 65535));
  PDKV_ASSIGN_OR_RETURN(std::string metrics_host,
                        config::read_string(settings, "PDKV_METRICS_HOST", "127.0.0.1"));
  if (Status host = check_host_name(metrics_host); !host.ok()) {
    return invalid_argument("PDKV_METRICS_HOST: " + host.message());
  }
  o.bootstrap_timeout = seconds_to_ms(bootstrap_s);
  o.waiting_timeout = seconds_to_ms(waiting_s);
  o.metadata_timeout = seconds_to_ms(metadata_s);
  o.heartbeat_interval = seconds_to_ms(heartbeat_s);
  o.heartbeat_max_failures = static_cast<int>(max_failures);
  o.failed_peer_ttl = seconds_to_ms(ttl_s);
  o.failed_peer_first_cooldown = seconds_to_ms(cooldown_s);
  o.transfer_attempts = static_cast<int>(attempts);
  o.bootstrap_refresh = seconds_to_ms(refresh_s);
  o.transfer_window_bytes = static_cast<uint64_t>(window);
  o.transfer_batch_bytes = static_cast<uint64_t>(batch);
  o.verify_checksum = checksum;
  o.status_in_band = in_band;
  o.max_decode_peers = max_peers;
  o.max_pending_rooms = max_pending;
  o.max_pending_rooms_per_decode = pending_per_decode;
  o.max_pending_bytes_per_decode = pending_bytes;
  o.local_ip = std::move(local_ip);
  o.metrics_port = static_cast<int>(metrics_port);
  o.metrics_host = std::move(metrics_host);
  return o;
}

}  // namespace pdkv::kv
