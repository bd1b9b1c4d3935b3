#include "kv/manager_options.h"

#include <cmath>

#include "common/config.h"
#include "common/host_name.h"
#include "kv/manager_settings.h"

namespace pdkv::kv {
namespace {

std::chrono::milliseconds seconds_to_ms(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000.0)));
}

}  // namespace

Result<KvManagerOptions> KvManagerOptions::from(const config::Settings& settings) {
  KvManagerOptions o;
  PDKV_ASSIGN_OR_RETURN(double bootstrap_s, config::read<kBootstrapTimeoutS>(settings));
  PDKV_ASSIGN_OR_RETURN(double waiting_s, config::read<kWaitingTimeoutS>(settings));
  PDKV_ASSIGN_OR_RETURN(double metadata_s, config::read<kMetadataTimeoutS>(settings));
  PDKV_ASSIGN_OR_RETURN(double attempt_s, config::read<kRouteAttemptTimeoutS>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t breaker_failures, config::read<kRouteBreakerFailures>(settings));
  PDKV_ASSIGN_OR_RETURN(double breaker_backoff_s, config::read<kRouteBreakerBackoffS>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t max_resolving, config::read<kMaxResolvingInstances>(settings));
  PDKV_ASSIGN_OR_RETURN(double heartbeat_s, config::read<kHeartbeatIntervalS>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t max_failures, config::read<kHeartbeatMaxFailures>(settings));
  PDKV_ASSIGN_OR_RETURN(double ttl_s, config::read<kFailedPeerTtlS>(settings));
  PDKV_ASSIGN_OR_RETURN(double cooldown_s, config::read<kFailedPeerCooldownS>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t attempts, config::read<kTransferAttempts>(settings));
  PDKV_ASSIGN_OR_RETURN(double refresh_s, config::read<kBootstrapRefreshS>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t window, config::read<kTransferWindowBytes>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t batch, config::read<kTransferBatchBytes>(settings));
  PDKV_ASSIGN_OR_RETURN(bool checksum, config::read<kVerifyChecksum>(settings));
  PDKV_ASSIGN_OR_RETURN(bool in_band, config::read<kStatusInBand>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t max_peers, config::read<kMaxDecodePeers>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t max_pending, config::read<kMaxPendingRooms>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t pending_per_decode,
                        config::read<kMaxPendingRoomsPerDecode>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t pending_bytes, config::read<kMaxPendingBytesPerDecode>(settings));
  PDKV_ASSIGN_OR_RETURN(std::string local_ip, config::read<kLocalIp>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t metrics_port, config::read<kMetricsPort>(settings));
  PDKV_ASSIGN_OR_RETURN(std::string metrics_host, config::read<kMetricsHost>(settings));
  if (Status host = check_host_name(metrics_host); !host.ok()) {
    return invalid_argument(std::string(kMetricsHost.name) + ": " + host.message());
  }
  o.bootstrap_timeout = seconds_to_ms(bootstrap_s);
  o.waiting_timeout = seconds_to_ms(waiting_s);
  o.metadata_timeout = seconds_to_ms(metadata_s);
  o.route_attempt_timeout = seconds_to_ms(attempt_s);
  o.route_breaker_failures = static_cast<int>(breaker_failures);
  o.route_breaker_backoff = seconds_to_ms(breaker_backoff_s);
  o.max_resolving_instances = static_cast<int>(max_resolving);
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
