// RequestDeadlines: the whole-request deadline of the HTTP servers (http_listener.h).
//
// libmicrohttpd's own timeout (MHD_OPTION_CONNECTION_TIMEOUT) is an idle timeout: every
// byte received restarts it, so a client that sends one header byte a second would hold
// its connection forever (slowloris). This watchdog gives each request a deadline counted
// from the connection's accept, or from the end of the previous request on a kept-alive
// connection, until its response is sent; past it the socket is shut down, and the HTTP
// library, seeing the connection end, closes it and frees what it held.
//
// Thread safety: opened/restarted/closed come from the HTTP library's threads; a thread
// of its own checks the deadlines. Contract: closed(key) happens before the library
// closes the descriptor (libmicrohttpd reports MHD_CONNECTION_NOTIFY_CLOSED first), and
// the watchdog shuts sockets down only under the mutex that closed() takes, so it never
// touches a descriptor number that has been reused.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"

namespace pdkv::http {

class RequestDeadlines {
 public:
  // Starts the watchdog thread; the destructor stops and joins it.
  explicit RequestDeadlines(std::chrono::milliseconds deadline);
  ~RequestDeadlines();
  RequestDeadlines(const RequestDeadlines&) = delete;
  RequestDeadlines& operator=(const RequestDeadlines&) = delete;

  // A connection was accepted on `fd`; `key` names it until closed().
  void opened(const void* key, int fd) PDKV_EXCLUDES(mu_);
  // Its request was answered: the next request on it gets a fresh deadline.
  void restarted(const void* key) PDKV_EXCLUDES(mu_);
  // It is about to be closed: the watchdog forgets it.
  void closed(const void* key) PDKV_EXCLUDES(mu_);

  // Connections shut down so far because a request outlived the deadline.
  uint64_t expired() const PDKV_EXCLUDES(mu_);

 private:
  struct Connection {
    int fd;
    TimePoint deadline;
    bool shut = false;  // shut down already; waiting for the library to close it
  };
  void run() PDKV_EXCLUDES(mu_);
  // Shuts down the connections past their deadline; returns the next deadline to wake at.
  TimePoint expire_overdue(TimePoint at) PDKV_REQUIRES(mu_);

  const std::chrono::milliseconds deadline_;
  mutable Mutex mu_;
  CondVar wake_;
  std::unordered_map<const void*, Connection> connections_ PDKV_GUARDED_BY(mu_);
  uint64_t expired_ PDKV_GUARDED_BY(mu_) = 0;
  bool rescan_ PDKV_GUARDED_BY(mu_) = false;  // opened() added the first connection
  bool stopping_ PDKV_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pdkv::http
