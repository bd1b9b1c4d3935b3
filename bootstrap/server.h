// The bootstrap HTTP server: prefill ranks register, decode ranks look them up.
//
//   PUT    /route   JSON registration (registration.h) -> 200 | 400 field | 409 layout conflict
//   GET    /route?engine_rank=-1&target_dp_group=-1  -> parallel info (404 before any rank)
//   GET    /route?engine_rank=-1&target_dp_group=g   -> all ranks of group g (404 until all)
//   GET    /route?engine_rank=t&target_dp_group=g    -> {"rank_ip","rank_port"} (404 until)
//   DELETE /route?engine_rank=t&target_dp_group=g    -> deregister (200 | 404)
//   GET    /health -> 200 "OK";  GET /metrics -> Prometheus text format
// engine_rank in queries is the tp rank inside the DP group, as in the reference. Every
// error is a JSON object {"error": message, "field": name-or-""}; other methods on
// /route get 405. No handler lets an exception escape (each is caught and becomes 500).
//
// Threads: an HttpListener (cpp-httplib's accept loop and its worker pool); handlers run
// on those workers and share only the RouteTable and the atomic counters. stop() (from
// any thread, idempotent; also run by the destructor) closes the socket and joins.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "bootstrap/http_listener.h"
#include "bootstrap/route_table.h"
#include "common/status.h"

namespace httplib {
class Server;
}

namespace pdkv::bootstrap {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 8998;  // 0 = any free port (see BootstrapServer::port())
  size_t max_body_bytes = kMaxBodyBytes;
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

  const RouteTable& table() const { return table_; }
  std::string metrics_text() const;

 private:
  enum Counter { kPut, kGet, kDelete, kHealth, kMetrics, kNumRequestKinds };
  enum ErrorKind { kBadRequest, kNotFound, kConflict, kMethod, kTooLarge, kInternal, kNumErrors };

  BootstrapServer() = default;
  void install_routes(httplib::Server& h);
  void count_error(int status);

  std::string host_;
  int port_ = 0;
  ServerOptions options_;
  RouteTable table_;
  std::unique_ptr<HttpListener> listener_;
  std::atomic<uint64_t> requests_[kNumRequestKinds] = {};
  std::atomic<uint64_t> errors_[kNumErrors] = {};
};

}  // namespace pdkv::bootstrap
