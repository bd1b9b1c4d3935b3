#include "http/http_replies.h"

#include <nlohmann/json.hpp>

namespace pdkv::http {

void reply_error(HttpResponse& res, int status, std::string_view field, std::string_view message) {
  res.status = status;
  res.set_content(nlohmann::json{{"error", message}, {"field", field}}.dump(), "application/json");
}

int http_status_of(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound: return 404;
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

}  // namespace pdkv::http
