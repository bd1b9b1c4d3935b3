#include "bootstrap/http_listener.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/logging.h"

namespace pdkv::bootstrap {

Result<std::unique_ptr<HttpListener>> HttpListener::start(
    const HttpListenerOptions& options, const std::function<void(httplib::Server&)>& install) {
  std::unique_ptr<HttpListener> l(new HttpListener());
  try {
    l->http_ = std::make_unique<httplib::Server>();
    l->http_->set_payload_max_length(options.max_body_bytes);
    // cpp-httplib's default also sets SO_REUSEPORT, which lets a second process bind the
    // same port and silently take a share of the requests (routes registered there are
    // lost to the first). SO_REUSEADDR alone still allows a restart on the same port.
    l->http_->set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    install(*l->http_);
    int port = options.port == 0
                   ? l->http_->bind_to_any_port(options.host)
                   : (l->http_->bind_to_port(options.host, options.port) ? options.port : -1);
    if (port <= 0) {
      return unavailable(
          fmt::format("{}: cannot bind {}:{}", options.name, options.host, options.port));
    }
    l->port_ = port;
  } catch (const std::exception& e) {
    return internal_error(fmt::format("{}: start failed: {}", options.name, e.what()));
  }
  httplib::Server* http = l->http_.get();
  l->thread_ = std::thread([http, name = options.name] {
    try {
      http->listen_after_bind();
    } catch (const std::exception& e) {
      PDKV_LOG_ERROR("{}: listener stopped: {}", name, e.what());
    }
  });
  // cpp-httplib 0.11's stop() does nothing until the accept loop has started, so a stop()
  // right after start() would leave the listener running and hang the join. Return only
  // once it runs (it sets is_running() as its first step; bounded wait).
  auto ready_deadline = now() + std::chrono::seconds(10);
  while (!http->is_running() && now() < ready_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!http->is_running()) {
    l->stop();
    return internal_error(options.name + ": HTTP listener did not start within 10 s");
  }
  return l;
}

HttpListener::~HttpListener() { stop(); }

void HttpListener::stop() {
  if (stopped_.exchange(true)) return;
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pdkv::bootstrap
