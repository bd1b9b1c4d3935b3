// One cpp-httplib server bound and serving on its own thread: what the bootstrap server
// and a manager's metrics endpoint both need, with the start/stop care written once.
//
// start() binds synchronously (port() is valid and connections are accepted on return);
// stop() (idempotent, also run by the destructor) closes the socket and joins.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace httplib {
class Server;
}

namespace pdkv::bootstrap {

struct HttpListenerOptions {
  std::string name;  // for logs and errors: "bootstrap", "metrics"
  std::string host = "0.0.0.0";
  int port = 0;  // 0 = any free port
  size_t max_body_bytes = 1 << 20;
};

class HttpListener {
 public:
  // `install` adds the routes before the socket is bound. kUnavailable if it cannot bind.
  static Result<std::unique_ptr<HttpListener>> start(
      const HttpListenerOptions& options, const std::function<void(httplib::Server&)>& install);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  int port() const { return port_; }
  void stop();

 private:
  HttpListener() = default;
  int port_ = 0;
  std::unique_ptr<httplib::Server> http_;  // internally synchronised
  std::thread thread_;                     // runs http_->listen_after_bind()
  std::atomic<bool> stopped_{false};
};

}  // namespace pdkv::bootstrap
