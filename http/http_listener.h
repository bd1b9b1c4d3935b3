// One HTTP server, bound and serving on threads of its own, with every resource it gives a
// client bounded: what the bootstrap server, the etcd registry's HTTP view and the metrics
// endpoints all need, written once. Handlers see pdkv's own types (http_types.h) through
// an HttpRouter (http_router.h).
//
// Why libmicrohttpd: cpp-httplib 0.11 (Debian 12's, which pdkv used before) could not
// bound a server. It buffered chunked request bodies past its body limit (3.9 GB
// observed), took any number of headers, gave every connection a worker thread for as
// long as the client kept sending (10 slowloris connections pinned the bootstrap server:
// /health stopped answering) and had no connection cap. libmicrohttpd (Debian's
// libmicrohttpd12) hands the body over in pieces, so the limit holds for chunked bodies
// too; bounds each connection's memory, which bounds the request line and headers; caps
// connections, overall and per client address; and serves every connection from a small
// fixed pool of threads polling with epoll, so an idle or slow connection costs no thread.
// What it lacks, a whole-request deadline (its own timeout restarts with every byte) and a
// header count limit, this class adds. cpp-httplib stays for the HTTP clients.
//
//   over max_body_bytes      -> 413 (declared length: before any body is read; chunked:
//                               as soon as the sum passes it), then the connection closes;
//                               nothing past the limit is kept
//   request line + headers   -> 431 (414 for the URL) past max_header_bytes, 431 past
//                               max_header_count headers
//   a request past request_deadline (slow sender or slow reader), or a connection idle
//                            -> past idle_timeout: the connection is closed
//   max_connections open     -> no more are accepted until one closes (new ones wait in
//                               the kernel's listen backlog; past it the kernel drops
//                               further attempts)
//   max_connections_per_ip   -> a further connection from that address is closed at once
// The socket is bound without SO_REUSEPORT (listen_socket.h): a second server on the same
// port is refused (kUnavailable) instead of silently sharing it.
//
// start() binds synchronously (port() is valid and connections are accepted on return);
// stop() (idempotent, also run by the destructor) closes the socket and every connection
// and joins the threads. Handlers run on the worker threads, outside the library's locks;
// a handler that blocks holds up the other connections of its worker, so they must be
// quick (all of pdkv's are: a table lookup or rendering counters).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "http/http_router.h"

struct MHD_Daemon;

namespace pdkv::http {

class RequestDeadlines;

struct HttpListenerOptions {
  std::string name;  // for logs and errors: "bootstrap", "metrics"
  std::string host = "0.0.0.0";
  int port = 0;  // 0 = any free port
  size_t max_body_bytes = 1 << 20;
  // The request line and headers must fit in libmicrohttpd's per-connection memory pool
  // (MHD_OPTION_CONNECTION_MEMORY_LIMIT, set to this), which also holds its bookkeeping
  // (some 50 bytes a header) and the reply's header block: so slightly less than this.
  size_t max_header_bytes = 32 * 1024;
  size_t max_header_count = 100;
  // Closes a connection that sends and reads nothing for this long
  // (MHD_OPTION_CONNECTION_TIMEOUT; whole seconds, at least 1).
  std::chrono::seconds idle_timeout{10};
  // From accept (or the previous reply on a kept-alive connection) to the reply sent.
  std::chrono::milliseconds request_deadline{15000};
  unsigned max_connections = 256;
  unsigned max_connections_per_ip = 64;  // 0 = no per-address cap
  // libmicrohttpd's thread pool: each worker polls its share of the connections (the
  // connection cap is split evenly between them).
  unsigned worker_threads = 4;
  int listen_backlog = 128;
};

class HttpListener {
 public:
  // Serves `router` (read-only from now on). kUnavailable if it cannot bind;
  // kInvalidArgument for options that bound nothing (zero limits, a bad port).
  static Result<std::unique_ptr<HttpListener>> start(const HttpListenerOptions& options,
                                                     HttpRouter router);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  int port() const { return port_; }
  // Requests cut off by request_deadline so far (their connections were closed).
  uint64_t deadline_expiries() const;
  void stop();

  // libmicrohttpd's callbacks (http_listener.cc) reach the listener through these.
  struct Callbacks;

 private:
  HttpListener(HttpListenerOptions options, HttpRouter router);

  const HttpListenerOptions options_;
  const HttpRouter router_;
  int port_ = 0;
  std::unique_ptr<RequestDeadlines> deadlines_;
  MHD_Daemon* daemon_ = nullptr;  // internally synchronised; runs its own threads
  std::atomic<bool> stopped_{false};
};

}  // namespace pdkv::http
