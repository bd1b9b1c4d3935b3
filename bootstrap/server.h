// The bootstrap HTTP server: prefill ranks register, decode ranks look them up.
//
//   PUT    /route   JSON registration (registration.h) -> 200 | 400 field | 409 layout conflict
//   GET    /route?engine_rank=-1&target_dp_group=-1  -> parallel info (404 before any rank)
//   GET    /route?engine_rank=-1&target_dp_group=g   -> all ranks of group g (404 until all)
//   GET    /route?engine_rank=t&target_dp_group=g    -> {"rank_ip","rank_port"} (404 until)
//   DELETE /route?engine_rank=t&target_dp_group=g    -> deregister (200 | 404)
//   POST   /register_dp_rank {"bootstrap_room","dp_rank"} -> 200 | 400 field (charged to
//          the client's address: one address holds at most an eighth of the table)
//   POST   /query_dp_ranks {"bootstrap_rooms":[...]} -> {"<room>": dp_rank} for known rooms
//          (room_dp_ranks.h: where a prefill DP balancer placed a room, for sglang decodes)
//   GET    /health -> 200 "OK";  GET /metrics -> Prometheus text format
// With a cluster secret, PUT, DELETE and POST /register_dp_rank (and GET /route and POST
// /query_dp_ranks if authenticate_reads) need a
// signed X-Pdkv-Auth header (request_auth.h): 401 otherwise.
// engine_rank in queries is the tp rank inside the DP group, as in the reference. Every
// error is a JSON object {"error": message, "field": name-or-""}; other methods on
// /route get 405. No handler lets an exception escape (each is caught and becomes 500).
// A body over max_body_bytes is a 400 naming the body; the other limits (headers,
// connections, deadlines) are the HttpListener's (http_listener.h).
//
// Threads: an HttpListener (libmicrohttpd's worker pool); handlers run on those workers
// and share only the RouteTable and the atomic counters. stop() (from any thread,
// idempotent; also run by the destructor) closes the socket and joins.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "bootstrap/request_auth.h"
#include "bootstrap/room_dp_ranks.h"
#include "bootstrap/route_table.h"
#include "common/config.h"
#include "common/status.h"
#include "http/http_listener.h"

namespace pdkv::bootstrap {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 8998;  // 0 = any free port (see BootstrapServer::port())
  size_t max_body_bytes = kMaxBodyBytes;
  // Set: PUT and DELETE must carry a valid X-Pdkv-Auth (request_auth.h), else 401; null:
  // anyone may write routes (warned at start).
  std::shared_ptr<const ClusterKey> cluster_key;
  // With a key: GETs must be signed too (route lookups tell where ranks listen).
  bool authenticate_reads = false;
  // Rooms the DP placement table (room_dp_ranks.h) holds at most, all sources together
  // (about 150 bytes each: 2^18 rooms stay under 40 MiB); one client address may hold
  // an eighth of them.
  size_t dp_placement_capacity = size_t{1} << 18;

  // The cluster key from PDKV_SECRET_FILE (`settings` first, then the environment: the
  // same rule as a manager's); the other fields keep their defaults.
  static Result<ServerOptions> from(const config::Settings& settings);
  // kInvalidArgument for options that cannot serve: reads authenticated without a key.
  Status check() const;
};

class BootstrapServer {
 public:
  // Binds (synchronously: port() is valid and connections are accepted on return) and
  // starts serving. kUnavailable if the address cannot be bound.
  static Result<std::unique_ptr<BootstrapServer>> start(const ServerOptions& options);
  ~BootstrapServer();
  BootstrapServer(const BootstrapServer&) = delete;
  BootstrapServer& operator=(const BootstrapServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  void stop();

  // Pipeline stage 0's table (an instance without pipeline parallelism has only it).
  const RouteTable& table() const { return stage_tables_[0]; }
  std::string metrics_text() const;

 private:
  enum Counter {
    kPut,
    kGet,
    kDelete,
    kHealth,
    kMetrics,
    kRegisterDpRank,
    kQueryDpRanks,
    kNumRequestKinds
  };
  enum ErrorKind {
    kBadRequest,
    kUnauthorized,
    kNotFound,
    kConflict,
    kMethod,
    kTooLarge,
    kInternal,
    kNumErrors
  };

  BootstrapServer() = default;
  void install_routes(http::HttpRouter& h);
  // Route lookups are reads; registrations and removals are writes.
  enum class Access { kRead, kWrite };

  // True if the request may proceed; else answers 401 and counts it.
  bool authenticated(const http::HttpRequest& req, http::HttpResponse& res);
  // Counts the request, then checks its signature where the server asks for one: on every
  // write, on reads only with authenticate_reads. False once it answered 401.
  bool admitted(Counter counter, Access access, const http::HttpRequest& req,
                http::HttpResponse& res);
  void count_error(int status);

  std::string host_;
  int port_ = 0;
  ServerOptions options_;
  // One table per pipeline stage, indexed by pp_rank: a stage's ranks hold other layers,
  // so each stage agrees on a layout of its own.
  std::array<RouteTable, kMaxPipelineStages> stage_tables_;
  // A room's DP placement matters only until its decode resolved it (seconds); ten
  // minutes covers any bootstrap timeout. Sized by options.dp_placement_capacity in start().
  std::unique_ptr<RoomDpRanks> room_dp_ranks_;
  std::unique_ptr<http::HttpListener> listener_;
  std::atomic<uint64_t> requests_[kNumRequestKinds] = {};
  std::atomic<uint64_t> errors_[kNumErrors] = {};
  std::atomic<uint64_t> auth_refused_{0};
  // Drawn per process start: signatures made for it verify here only, so neither another
  // server of the cluster nor this one after a restart accepts a captured request.
  const ServerId id_ = random_server_id();
  RequestVerifier verifier_{id_};
};

}  // namespace pdkv::bootstrap
