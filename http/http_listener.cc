#include "http/http_listener.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <optional>

#include "common/logging.h"
#include "http/http_request_deadlines.h"
#include "http/listen_socket.h"

namespace pdkv::http {
namespace {

// What one request gathers between libmicrohttpd's calls of the access handler: the
// first call brings the headers, the next ones the body in pieces, the last none.
struct PendingRequest {
  HttpRequest request;
  bool headers_read = false;
};

std::string address_of(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr == nullptr) return "";
  if (addr->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof text);
  } else if (addr->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text,
                sizeof text);
  }
  return text;
}

MHD_Result collect_header(void* cls, MHD_ValueKind, const char* key, const char* value) {
  static_cast<HttpHeaders*>(cls)->add(key, value ? value : "");
  return MHD_YES;
}

MHD_Result collect_query(void* cls, MHD_ValueKind, const char* key, const char* value) {
  // emplace keeps the first value of a repeated key, as cpp-httplib's lookup did.
  static_cast<std::map<std::string, std::string>*>(cls)->emplace(key, value ? value : "");
  return MHD_YES;
}

// The declared Content-Length, if the request has a well-formed one (libmicrohttpd
// refuses a malformed one itself).
std::optional<uint64_t> declared_length(const HttpHeaders& headers) {
  const std::string& text = headers.get("Content-Length");
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return n;
}

MHD_Result send_reply(MHD_Connection* connection, const HttpResponse& res, bool close) {
  MHD_Response* r = MHD_create_response_from_buffer(
      res.body.size(), const_cast<char*>(res.body.data()), MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;  // out of memory: libmicrohttpd closes the connection
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, res.content_type.c_str());
  for (const auto& [name, value] : res.headers.entries()) {
    MHD_add_response_header(r, name.c_str(), value.c_str());
  }
  if (close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(res.status), r);
  MHD_destroy_response(r);
  return queued;
}

// libmicrohttpd 0.9.75 takes a reply only before the body starts or after it has all
// arrived, so a chunked body that passes the limit midway cannot be answered through it.
// The reply is written straight to the socket instead (one non-blocking send of a few
// hundred bytes into a socket nothing else has written to yet, best effort) and the
// handler's MHD_NO then makes libmicrohttpd close the connection, dropping the rest.
void write_reply_before_close(MHD_Connection* connection, const HttpResponse& res) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (info == nullptr) return;
  const char* reason = MHD_get_reason_phrase_for(static_cast<unsigned>(res.status));
  std::string wire =
      fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", res.status,
                  reason ? reason : "", res.content_type, res.body.size());
  for (const auto& [name, value] : res.headers.entries()) {
    wire += fmt::format("{}: {}\r\n", name, value);
  }
  wire += "Connection: close\r\n\r\n";
  wire += res.body;
  (void)::send(info->connect_fd, wire.data(), wire.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

// libmicrohttpd's callbacks; `cls` is the HttpListener, which outlives its daemon.
struct HttpListener::Callbacks {
  // The first thing libmicrohttpd reports of a request: its target exactly as sent (the
  // access handler only gets the decoded path). What it returns is the request's context.
  static void* on_uri(void*, const char* uri, MHD_Connection*) {
    auto* pending = new PendingRequest();
    pending->request.target = uri;
    return pending;
  }

  static MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url,
                               const char* method, const char*, const char* upload_data,
                               size_t* upload_data_size, void** context) {
    auto* self = static_cast<HttpListener*>(cls);
    auto* pending = static_cast<PendingRequest*>(*context);
    if (pending == nullptr) {  // on_uri always runs first; kept safe all the same
      pending = new PendingRequest();
      pending->request.target = url;
      *context = pending;
    }
    HttpRequest& req = pending->request;
    if (!pending->headers_read) {
      pending->headers_read = true;
      return begin_request(self, connection, url, method, req);
    }
    if (*upload_data_size > 0) {
      const size_t limit = self->options_.max_body_bytes;
      if (*upload_data_size > limit - req.body.size()) {  // body.size() <= limit always
        write_reply_before_close(connection, too_large(self, req));
        return MHD_NO;
      }
      req.body.append(upload_data, *upload_data_size);
      *upload_data_size = 0;
      return MHD_YES;
    }
    return send_reply(connection, self->router_.handle(req), false);
  }

  // The headers are in: fill the request, and refuse it now if its headers or declared
  // body break a limit (libmicrohttpd then skips the body and closes the connection).
  static MHD_Result begin_request(HttpListener* self, MHD_Connection* connection, const char* url,
                                  const char* method, HttpRequest& req) {
    req.method_name = method;
    req.method = parse_http_method(req.method_name);
    req.path = url;
    const MHD_ConnectionInfo* peer =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    req.remote_addr = address_of(peer ? peer->client_addr : nullptr);
    const int header_count =
        MHD_get_connection_values(connection, MHD_HEADER_KIND, nullptr, nullptr);
    if (header_count < 0 || static_cast<size_t>(header_count) > self->options_.max_header_count) {
      return send_reply(
          connection,
          self->router_.refuse(req, 431,
                               fmt::format("{} headers; at most {} are accepted", header_count,
                                           self->options_.max_header_count)),
          true);
    }
    MHD_get_connection_values(connection, MHD_HEADER_KIND, collect_header, &req.headers);
    MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, collect_query, &req.query);
    if (auto length = declared_length(req.headers)) {
      if (*length > self->options_.max_body_bytes) {
        return send_reply(connection, too_large(self, req), true);
      }
      req.body.reserve(*length);
    }
    return MHD_YES;
  }

  static HttpResponse too_large(HttpListener* self, const HttpRequest& req) {
    return self->router_.refuse(
        req, 413, fmt::format("body exceeds the limit of {} bytes", self->options_.max_body_bytes));
  }

  static void on_completed(void* cls, MHD_Connection* connection, void** context,
                           MHD_RequestTerminationCode why) {
    delete static_cast<PendingRequest*>(*context);
    *context = nullptr;
    if (why == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
      static_cast<HttpListener*>(cls)->deadlines_->restarted(connection);
    }
  }

  static void on_connection(void* cls, MHD_Connection* connection, void**,
                            MHD_ConnectionNotificationCode what) {
    RequestDeadlines& deadlines = *static_cast<HttpListener*>(cls)->deadlines_;
    if (what == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      if (info != nullptr) deadlines.opened(connection, info->connect_fd);
    } else {
      // Reported before libmicrohttpd closes the socket (http_request_deadlines.h).
      deadlines.closed(connection);
    }
  }

  // libmicrohttpd's own messages (a refused connection, a malformed request): mostly
  // caused by clients, so debug level, never a flood of warnings.
  static void on_log(void* cls, const char* format, va_list args) {
    char text[512];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    std::vsnprintf(text, sizeof text, format, args);
#pragma GCC diagnostic pop
    std::string_view line(text);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    PDKV_LOG_DEBUG("{}: libmicrohttpd: {}", static_cast<HttpListener*>(cls)->options_.name, line);
  }
};

HttpListener::HttpListener(HttpListenerOptions options, HttpRouter router)
    : options_(std::move(options)), router_(std::move(router)) {}

Result<std::unique_ptr<HttpListener>> HttpListener::start(const HttpListenerOptions& options,
                                                          HttpRouter router) {
  if (options.max_header_count == 0 || options.max_header_bytes < 1024 ||
      options.max_connections == 0 || options.worker_threads == 0 ||
      options.idle_timeout.count() < 1 || options.request_deadline.count() <= 0) {
    return invalid_argument(options.name +
                            ": HTTP limits must be positive (header bytes at least 1024, "
                            "idle timeout at least 1 s)");
  }
  std::unique_ptr<HttpListener> l(new HttpListener(options, std::move(router)));
  Result<ListenSocket> sock =
      bind_listen_socket(options.host, options.port, options.listen_backlog);
  if (!sock.ok()) return sock.status().with_context(options.name);
  l->deadlines_ = std::make_unique<RequestDeadlines>(options.request_deadline);
  // A worker's share of the connection cap must not be zero.
  const unsigned workers = std::min(options.worker_threads, options.max_connections);
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
  if (sock->ipv6) flags |= MHD_USE_IPv6;
  HttpListener* raw = l.get();
  l->daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &Callbacks::on_request, raw,  //
                                MHD_OPTION_LISTEN_SOCKET, sock->fd,                       //
                                MHD_OPTION_CONNECTION_LIMIT, options.max_connections,     //
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT, options.max_connections_per_ip,
                                MHD_OPTION_CONNECTION_TIMEOUT,
                                static_cast<unsigned>(options.idle_timeout.count()),
                                MHD_OPTION_CONNECTION_MEMORY_LIMIT, options.max_header_bytes,  //
                                MHD_OPTION_THREAD_POOL_SIZE, workers,                          //
                                MHD_OPTION_URI_LOG_CALLBACK, &Callbacks::on_uri, raw,          //
                                MHD_OPTION_NOTIFY_COMPLETED, &Callbacks::on_completed, raw,    //
                                MHD_OPTION_NOTIFY_CONNECTION, &Callbacks::on_connection, raw,  //
                                MHD_OPTION_EXTERNAL_LOGGER, &Callbacks::on_log, raw,           //
                                MHD_OPTION_END);
  if (l->daemon_ == nullptr) {
    // libmicrohttpd closes the listen socket on some of its failure paths and not on
    // others; closing it again here could close a descriptor another thread has since
    // been given, so it is left open (this happens only out of threads or memory).
    return internal_error(fmt::format("{}: libmicrohttpd did not start on {}:{}", options.name,
                                      options.host, sock->port));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(l->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  l->port_ = info != nullptr && info->port != 0 ? info->port : sock->port;
  return l;
}

HttpListener::~HttpListener() { stop(); }

uint64_t HttpListener::deadline_expiries() const { return deadlines_ ? deadlines_->expired() : 0; }

void HttpListener::stop() {
  if (stopped_.exchange(true)) return;
  // Closes the listen socket and every connection (each reported closed to deadlines_)
  // and joins libmicrohttpd's threads. The watchdog goes with the listener (members are
  // destroyed after this ran in the destructor), so deadline_expiries() stays valid.
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
}

}  // namespace pdkv::http
