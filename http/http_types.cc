#include "http/http_types.h"

#include <strings.h>

namespace pdkv::http {
namespace {

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

constexpr std::pair<HttpMethod, std::string_view> kMethodNames[] = {
    {HttpMethod::kGet, "GET"},         {HttpMethod::kHead, "HEAD"},
    {HttpMethod::kPut, "PUT"},         {HttpMethod::kPost, "POST"},
    {HttpMethod::kDelete, "DELETE"},   {HttpMethod::kPatch, "PATCH"},
    {HttpMethod::kOptions, "OPTIONS"},
};

}  // namespace

std::string_view http_method_name(HttpMethod method) {
  for (const auto& [m, name] : kMethodNames) {
    if (m == method) return name;
  }
  return "OTHER";
}

HttpMethod parse_http_method(std::string_view name) {
  for (const auto& [m, known] : kMethodNames) {
    if (known == name) return m;
  }
  return HttpMethod::kOther;
}

void HttpHeaders::add(std::string name, std::string value) {
  entries_.emplace_back(std::move(name), std::move(value));
}

const std::string& HttpHeaders::get(std::string_view name) const {
  static const std::string kNone;
  for (const auto& [n, v] : entries_) {
    if (equal_ignoring_case(n, name)) return v;
  }
  return kNone;
}

bool HttpHeaders::has(std::string_view name) const {
  for (const auto& entry : entries_) {
    if (equal_ignoring_case(entry.first, name)) return true;
  }
  return false;
}

std::string HttpRequest::param(const std::string& name) const {
  auto it = query.find(name);
  return it == query.end() ? std::string() : it->second;
}

}  // namespace pdkv::http
