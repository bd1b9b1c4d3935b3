// RegistryHttpServer: `pdkv bootstrap --registry etcd --instance NAME` — the bootstrap
// server's routes (bootstrap/server.h: same queries, JSON and authentication) for the
// routes of one prefill instance kept in etcd, so tools that only speak HTTP (and decodes
// left on PDKV_REGISTRY=http) keep working when the ranks register in etcd. Route answers
// come from the watched mirror (etcd_route_watcher.h), never from a table of its own:
//
//   GET /route?engine_rank=..&target_dp_group=..  as bootstrap/server.h, for NAME
//   GET /instances   every instance and rank under the prefix (operators' inspection)
//   POST /register_dp_rank, POST /query_dp_ranks  as bootstrap/server.h (room_dp_ranks.h):
//                    where a prefill DP balancer placed a room, kept in this process
//   GET /metrics     Prometheus text: the instance's ranks in etcd, requests by endpoint,
//                    refused requests (the bootstrap server's metric names)
//   GET /health      200 "OK" while the mirror is in sync with etcd, else 503 naming etcd;
//                    names this server's id (X-Pdkv-Server) as the bootstrap server does
//   PUT, DELETE /route  405: ranks register in etcd themselves (PDKV_REGISTRY=etcd)
//
// With a cluster key, POST /register_dp_rank must be signed (X-Pdkv-Auth,
// bootstrap/request_auth.h, checked by the bootstrap server's own RequestVerifier), and
// with authenticate_reads so must GET /route, GET /instances and POST /query_dp_ranks:
// 401 otherwise, naming this server's id.
//
// Threads: an HttpListener's workers run the handlers; they read the watcher
// (thread-safe). stop() from any thread, idempotent; also run by the destructor.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "bootstrap/request_auth.h"
#include "bootstrap/room_dp_ranks.h"
#include "http/http_listener.h"
#include "kv/registry/etcd_route_watcher.h"

namespace pdkv::kv {

struct RegistryHttpOptions {
  std::string host = "0.0.0.0";
  int port = 8998;  // 0 = any free port
  // Set: DP-rank registrations must be signed; null: no request is checked.
  std::shared_ptr<const ClusterKey> cluster_key;
  // With a key: route lookups, /instances and DP-rank queries must be signed too.
  bool authenticate_reads = false;
  // kInvalidArgument for reads authenticated without a key (the bootstrap server's rule).
  Status check() const;
};

class RegistryHttpServer {
 public:
  // `watcher` must outlive the server.
  static Result<std::unique_ptr<RegistryHttpServer>> start(EtcdRouteWatcher& watcher,
                                                           std::string instance,
                                                           const RegistryHttpOptions& options);
  // Unauthenticated, on host:port.
  static Result<std::unique_ptr<RegistryHttpServer>> start(EtcdRouteWatcher& watcher,
                                                           std::string instance,
                                                           const std::string& host, int port);
  ~RegistryHttpServer();
  RegistryHttpServer(const RegistryHttpServer&) = delete;
  RegistryHttpServer& operator=(const RegistryHttpServer&) = delete;

  int port() const { return listener_->port(); }
  void stop();

 private:
  RegistryHttpServer(EtcdRouteWatcher& watcher, std::string instance, RegistryHttpOptions options)
      : watcher_(watcher), instance_(std::move(instance)), options_(std::move(options)) {}
  void install_routes(http::HttpRouter& h);
  enum Endpoint {
    kRouteGet,
    kInstances,
    kRegisterDpRank,
    kQueryDpRanks,
    kHealth,
    kMetrics,
    kNumEndpoints
  };
  // Counts the request; true if it may proceed: a write always needs a valid signature
  // with a key, a read only with authenticate_reads. Else answers 401 naming this
  // server's id.
  bool admitted(Endpoint endpoint, bool write, const http::HttpRequest& req,
                http::HttpResponse& res);
  std::string metrics_text() const;

  EtcdRouteWatcher& watcher_;
  const std::string instance_;
  const RegistryHttpOptions options_;
  // As the bootstrap server's: a room's placement matters for seconds; bounded memory;
  // one client address holds at most an eighth of the table, so a flooder replaces only
  // its own placements (bootstrap/room_dp_ranks.h).
  bootstrap::RoomDpRanks room_dp_ranks_{std::chrono::minutes(10), size_t{1} << 18,
                                        (size_t{1} << 18) / 8};
  // Drawn per process start, as the bootstrap server's (request_auth.h).
  const bootstrap::ServerId id_ = bootstrap::random_server_id();
  bootstrap::RequestVerifier verifier_{id_};
  std::atomic<uint64_t> requests_[kNumEndpoints] = {};
  std::atomic<uint64_t> refused_{0};
  std::unique_ptr<http::HttpListener> listener_;
};

// Runs the server until SIGTERM/SIGINT (blocked in the caller's mask), reading
// PDKV_ETCD_* for the cluster; prints "pdkv bootstrap listening on H:P (etcd ...)". With a
// cluster secret (`secret_file`, else PDKV_SECRET_FILE) it serves only entries whose
// signature verifies (etcd_route_seal.h), as a decode would take them, and checks
// requests' signatures as above. Returns 2 for reads authenticated without a secret.
int run_registry_http_server(const std::string& host, int port, const std::string& instance,
                             const std::string& secret_file = "", bool authenticate_reads = false);

}  // namespace pdkv::kv
