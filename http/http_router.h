// HttpRouter: which handler answers a request, by method and exact path, and what happens
// when none does. Every pdkv HTTP server builds one and hands it to its HttpListener.
//
//   a route matches          -> its handler (HEAD uses the GET handler unless it has one)
//   the path has no route    -> 404
//   the path has other verbs -> 405 with an Allow header
//   a handler throws         -> 500 (no exception reaches the HTTP library)
// Every reply >= 400 without a body gets the JSON error body of http_replies.h. The
// on_error hook then sees every reply >= 400 (handlers', the router's own and the
// listener's refusals, such as a body over the limit) before it is sent: the bootstrap
// server counts them there.
//
// Thread safety: set up (on, on_error) before the listener starts; after that the router
// is only read, from any number of HTTP worker threads at once.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "http/http_types.h"

namespace pdkv::http {

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

class HttpRouter {
 public:
  explicit HttpRouter(std::string name) : name_(std::move(name)) {}

  void on(HttpMethod method, std::string path, HttpHandler handler);
  void on_error(HttpHandler hook) { error_hook_ = std::move(hook); }

  HttpResponse handle(const HttpRequest& req) const;
  // A reply the listener gives without running a handler (413 body too large, 431 too
  // many headers): a JSON error with `message`, then the on_error hook.
  HttpResponse refuse(const HttpRequest& req, int status, std::string_view message) const;

 private:
  struct Route {
    HttpMethod method;
    std::string path;
    HttpHandler handler;
  };
  const Route* find(HttpMethod method, const std::string& path) const;
  void dispatch(const HttpRequest& req, HttpResponse& res) const;
  void finish(const HttpRequest& req, HttpResponse& res) const;

  std::string name_;
  std::vector<Route> routes_;  // a handful: a linear search is the simplest fast enough
  HttpHandler error_hook_;
};

}  // namespace pdkv::http
