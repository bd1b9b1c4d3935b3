// The request and response every pdkv HTTP server handles: pdkv's own small types, so the
// handlers (bootstrap server, etcd registry view, metrics endpoint) do not depend on the
// HTTP library behind HttpListener (http_listener.h).
//
// Thread safety: value types; a request is read by one handler at a time.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pdkv::http {

enum class HttpMethod { kGet, kHead, kPut, kPost, kDelete, kPatch, kOptions, kOther };

// "GET", "PUT", ...; kOther is "OTHER" (the request keeps the name it was sent with).
std::string_view http_method_name(HttpMethod method);
// Exact (case-sensitive, as HTTP method names are) match; anything else is kOther.
HttpMethod parse_http_method(std::string_view name);

// Header names compare case-insensitively (RFC 9110 §5.1); a repeated header keeps every
// value, get() returns the first.
class HttpHeaders {
 public:
  void add(std::string name, std::string value);
  // The first value of `name`, or "" if the request has none.
  const std::string& get(std::string_view name) const;
  bool has(std::string_view name) const;
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, std::string>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
};

struct HttpRequest {
  HttpMethod method = HttpMethod::kOther;
  std::string method_name;  // as sent ("GET", "PROPFIND", ...): for messages
  std::string path;         // decoded, without the query: "/route"
  std::string target;       // exactly as sent, path and query: what request_auth.h signs
  std::map<std::string, std::string> query;  // decoded; a repeated key keeps its first value
  HttpHeaders headers;
  std::string body;
  std::string remote_addr;  // "127.0.0.1", "::1", or "" if unknown

  bool has_param(const std::string& name) const { return query.count(name) > 0; }
  // The value of `name`, or "" if the query has none.
  std::string param(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
  HttpHeaders headers;  // besides Content-Type and Content-Length (the listener adds those)

  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
};

}  // namespace pdkv::http
