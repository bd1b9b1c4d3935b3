#include "http/http_router.h"

#include <fmt/format.h>

#include "common/logging.h"
#include "http/http_replies.h"

namespace pdkv::http {

void HttpRouter::on(HttpMethod method, std::string path, HttpHandler handler) {
  routes_.push_back(Route{method, std::move(path), std::move(handler)});
}

const HttpRouter::Route* HttpRouter::find(HttpMethod method, const std::string& path) const {
  for (const Route& r : routes_) {
    if (r.method == method && r.path == path) return &r;
  }
  return nullptr;
}

void HttpRouter::dispatch(const HttpRequest& req, HttpResponse& res) const {
  const Route* route = find(req.method, req.path);
  if (!route && req.method == HttpMethod::kHead) route = find(HttpMethod::kGet, req.path);
  if (route) return route->handler(req, res);
  std::string allow;
  for (const Route& r : routes_) {
    if (r.path != req.path) continue;
    if (!allow.empty()) allow += ", ";
    allow += http_method_name(r.method);
  }
  if (allow.empty()) {
    return reply_error(res, 404, "", fmt::format("no {} here", req.path));
  }
  res.headers.add("Allow", allow);
  reply_error(res, 405, "", fmt::format("method {} not allowed on {}", req.method_name, req.path));
}

HttpResponse HttpRouter::handle(const HttpRequest& req) const {
  HttpResponse res;
  try {
    dispatch(req, res);
  } catch (const std::exception& e) {
    PDKV_LOG_ERROR("{}: {} {} handler failed: {}", name_, req.method_name, req.path, e.what());
    res = HttpResponse();
    reply_error(res, 500, "", fmt::format("internal error: {}", e.what()));
  } catch (...) {
    res = HttpResponse();
    reply_error(res, 500, "", "internal error");
  }
  finish(req, res);
  return res;
}

HttpResponse HttpRouter::refuse(const HttpRequest& req, int status,
                                std::string_view message) const {
  HttpResponse res;
  reply_error(res, status, "", message);
  finish(req, res);
  return res;
}

void HttpRouter::finish(const HttpRequest& req, HttpResponse& res) const {
  if (res.status < 400) return;
  if (res.body.empty()) {
    reply_error(res, res.status, "",
                fmt::format("HTTP {} for {} {}", res.status, req.method_name, req.path));
  }
  if (!error_hook_) return;
  try {
    error_hook_(req, res);
  } catch (const std::exception& e) {
    PDKV_LOG_ERROR("{}: error hook failed: {}", name_, e.what());
  } catch (...) {
    PDKV_LOG_ERROR("{}: error hook failed", name_);
  }
}

}  // namespace pdkv::http
