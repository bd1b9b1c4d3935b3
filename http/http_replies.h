// The JSON error replies every pdkv HTTP endpoint gives (bootstrap server, the etcd
// registry's read-only view): {"error": message, "field": name-or-""}, and the HTTP status
// of a Status.
//
// Thread safety: pure functions.
#pragma once

#include <string_view>

#include "common/status.h"
#include "http/http_types.h"

namespace pdkv::http {

void reply_error(HttpResponse& res, int status, std::string_view field, std::string_view message);
// 404 NotFound, 409 FailedPrecondition, 400 InvalidArgument/OutOfRange, 401
// Unauthenticated, 503 Unavailable, else 500.
int http_status_of(const Status& s);

}  // namespace pdkv::http
