#include "bootstrap/server.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/logging.h"
#include "http/http_replies.h"

namespace pdkv::bootstrap {
namespace {

using http::http_status_of;
using http::HttpListener;
using http::HttpListenerOptions;
using http::HttpMethod;
using http::HttpRequest;
using http::HttpResponse;
using http::HttpRouter;
using http::reply_error;
using nlohmann::json;

// Parses a required integer query parameter; a missing or non-integer value is a 400
// naming the parameter.
bool query_int(const HttpRequest& req, HttpResponse& res, const char* name, int64_t* out) {
  if (!req.has_param(name)) {
    reply_error(res, 400, name, fmt::format("query parameter '{}' is missing", name));
    return false;
  }
  std::string v = req.param(name);
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty()) {
    reply_error(res, 400, name, fmt::format("query parameter '{}' is not an integer", name));
    return false;
  }
  return true;
}

// The request's body as `parse` reads it; a body it refuses is answered 400 naming the
// field at fault, and the (failed) Result tells the caller to stop there.
template <class T>
Result<T> parsed_body(const HttpRequest& req, HttpResponse& res,
                      Result<T> (*parse)(std::string_view, std::string*)) {
  std::string field;
  Result<T> parsed = parse(req.body, &field);
  if (!parsed.ok()) reply_error(res, 400, field, parsed.status().message());
  return parsed;
}

// The rank a GET or DELETE /route names: engine_rank and target_dp_group, checked in that
// order; false once the first one missing or malformed was answered 400.
bool query_rank(const HttpRequest& req, HttpResponse& res, int64_t* rank, int64_t* group) {
  return query_int(req, res, "engine_rank", rank) && query_int(req, res, "target_dp_group", group);
}

// The pipeline stage a GET or DELETE /route names (`target_pp_rank`, sglang's name; absent =
// stage 0); false once a malformed or out-of-range one was answered 400.
bool query_stage(const HttpRequest& req, HttpResponse& res, int64_t* stage) {
  *stage = 0;
  if (!req.has_param("target_pp_rank")) return true;
  if (!query_int(req, res, "target_pp_rank", stage)) return false;
  if (*stage < 0 || *stage >= kMaxPipelineStages) {
    reply_error(res, 400, "target_pp_rank",
                fmt::format("{} is not a pipeline stage in [0, {})", *stage, kMaxPipelineStages));
    return false;
  }
  return true;
}

json endpoint_json(const RankEndpoint& e) {
  return json{{"engine_rank", e.engine_rank},
              {"tp_rank", e.tp_rank},
              {"rank_ip", e.rank_ip},
              {"rank_port", e.rank_port}};
}

}  // namespace

Result<std::unique_ptr<BootstrapServer>> BootstrapServer::start(const ServerOptions& options) {
  PDKV_RETURN_IF_ERROR(options.check());
  std::unique_ptr<BootstrapServer> s(new BootstrapServer());
  s->options_ = options;
  s->host_ = options.host;
  // One client address may hold an eighth of the table, as an eighth of the connection
  // slots: enough for a busy prefill node, and a flooder replaces only its own rooms.
  s->room_dp_ranks_ = std::make_unique<RoomDpRanks>(
      std::chrono::minutes(10), options.dp_placement_capacity, options.dp_placement_capacity / 8);
  HttpListenerOptions listen{"bootstrap", options.host, options.port, options.max_body_bytes};
  HttpRouter router("bootstrap");
  s->install_routes(router);
  PDKV_ASSIGN_OR_RETURN(s->listener_, HttpListener::start(listen, std::move(router)));
  s->port_ = s->listener_->port();
  if (!options.cluster_key) warn_unauthenticated("bootstrap server");
  PDKV_LOG_INFO("bootstrap: serving on {}:{} ({})", s->host_, s->port_,
                options.cluster_key ? (options.authenticate_reads ? "every request authenticated"
                                                                  : "writes authenticated")
                                    : "unauthenticated");
  return s;
}

BootstrapServer::~BootstrapServer() { stop(); }

void BootstrapServer::stop() {
  if (listener_) listener_->stop();
}

void BootstrapServer::count_error(int status) {
  ErrorKind kind = kInternal;
  switch (status) {
    case 400: kind = kBadRequest; break;
    case 404: kind = kNotFound; break;
    case 405: kind = kMethod; break;
    case 409: kind = kConflict; break;
    case 401: kind = kUnauthorized; break;
    case 413: kind = kTooLarge; break;
    default: break;
  }
  errors_[kind].fetch_add(1, std::memory_order_relaxed);
}

bool BootstrapServer::authenticated(const HttpRequest& req, HttpResponse& res) {
  if (!options_.cluster_key) return true;
  Status st = verifier_.verify(*options_.cluster_key, req.headers.get(kAuthHeader), req.method_name,
                               req.target, req.body, unix_now_ms());
  if (st.ok()) return true;
  auth_refused_.fetch_add(1, std::memory_order_relaxed);
  PDKV_LOG_WARN_LIMITED("bootstrap: refused {} {} from {}: {}", req.method_name, req.path,
                        req.remote_addr, st.message());
  reply_error(res, 401, "", st.message());
  // Which server answered: a member that signed for this server before it restarted
  // learns the new id here and signs again.
  res.headers.add(kServerIdHeader, server_id_text(id_));
  return false;
}

bool BootstrapServer::admitted(Counter counter, Access access, const HttpRequest& req,
                               HttpResponse& res) {
  requests_[counter].fetch_add(1, std::memory_order_relaxed);
  if (access == Access::kRead && !options_.authenticate_reads) return true;
  return authenticated(req, res);
}

void BootstrapServer::install_routes(HttpRouter& h) {
  h.on(HttpMethod::kPut, "/route", [this](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(kPut, Access::kWrite, req, res)) return;
    auto reg = parsed_body(req, res, parse_registration);
    if (!reg.ok()) return;
    bool changed = true;
    // Every stage names the same stage count: a decode counts the stages it receives from.
    for (int64_t stage = 0; stage < kMaxPipelineStages; ++stage) {
      auto other = stage_tables_[stage].layout();
      if (stage != reg->pp_rank && other && other->pp_size != reg->layout.pp_size) {
        return reply_error(res, 409, "pp_size",
                           fmt::format("pp_size {} differs from pipeline stage {}'s {}",
                                       reg->layout.pp_size, stage, other->pp_size));
      }
    }
    Status st = stage_tables_[reg->pp_rank].register_rank(*reg, &changed);
    if (!st.ok()) {
      PDKV_LOG_WARN("bootstrap: refused engine_rank {}: {}", reg->engine_rank, st.message());
      return reply_error(res, http_status_of(st), "", st.message());
    }
    if (changed) {
      PDKV_LOG_INFO("bootstrap: registered engine_rank {} (pipeline stage {}) at {}:{}",
                    reg->engine_rank, reg->pp_rank, reg->rank_ip, reg->rank_port);
    }
    res.set_content("OK", "text/plain");
  });
  h.on(HttpMethod::kGet, "/route", [this](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(kGet, Access::kRead, req, res)) return;
    int64_t rank = 0, group = 0, stage = 0;
    if (!query_rank(req, res, &rank, &group) || !query_stage(req, res, &stage)) return;
    const RouteTable& table = stage_tables_[stage];
    if (rank == -1 && group == -1) {
      auto layout = table.layout();
      if (!layout) return reply_error(res, 404, "", "no prefill rank has registered yet");
      std::string body = fmt::format("{{{},\"registered_ranks\":{}}}",
                                     layout_to_json_fields(*layout), table.size());
      return res.set_content(body, "application/json");
    }
    if (rank == -1) {
      auto ranks = table.group(group);
      if (!ranks.ok()) {
        return reply_error(res, http_status_of(ranks.status()), "target_dp_group",
                           ranks.status().message());
      }
      json list = json::array();
      for (const auto& e : *ranks) list.push_back(endpoint_json(e));
      return res.set_content(json{{"dp_group", group}, {"ranks", list}}.dump(), "application/json");
    }
    auto e = table.lookup(group, rank);
    if (!e.ok()) {
      return reply_error(res, http_status_of(e.status()), "", e.status().message());
    }
    res.set_content(json{{"rank_ip", e->rank_ip}, {"rank_port", e->rank_port}}.dump(),
                    "application/json");
  });
  h.on(HttpMethod::kDelete, "/route", [this](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(kDelete, Access::kWrite, req, res)) return;
    int64_t rank = 0, group = 0, stage = 0;
    if (!query_rank(req, res, &rank, &group) || !query_stage(req, res, &stage)) return;
    Status st = stage_tables_[stage].remove(group, rank);
    if (!st.ok()) return reply_error(res, http_status_of(st), "", st.message());
    res.set_content("OK", "text/plain");
  });
  h.on(HttpMethod::kPost, "/register_dp_rank", [this](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(kRegisterDpRank, Access::kWrite, req, res)) return;
    auto entry = parsed_body(req, res, parse_room_dp_rank);
    if (!entry.ok()) return;
    // Checked against the instance when one registered: a rank outside it would send the
    // decode to a group that does not exist.
    if (auto layout = stage_tables_[0].layout(); layout) {
      if (auto why = dp_rank_outside(entry->dp_rank, layout->dp_size))
        return reply_error(res, 400, "dp_rank", *why);
    }
    // Charged to the client's address: a flooder's rooms push out its own only.
    room_dp_ranks_->put(*entry, req.remote_addr);
    res.set_content("OK", "text/plain");
  });
  h.on(HttpMethod::kPost, "/query_dp_ranks", [this](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(kQueryDpRanks, Access::kRead, req, res)) return;
    auto rooms = parsed_body(req, res, parse_room_query);
    if (!rooms.ok()) return;
    res.set_content(room_query_answer(room_dp_ranks_->find(*rooms)), "application/json");
  });
  // Other methods on /route get the router's 405.
  h.on(HttpMethod::kGet, "/health", [this](const HttpRequest&, HttpResponse& res) {
    requests_[kHealth].fetch_add(1, std::memory_order_relaxed);
    // The id members sign their requests for (request_auth.h); public, like /health.
    res.headers.add(kServerIdHeader, server_id_text(id_));
    res.set_content("OK", "text/plain");
  });
  h.on(HttpMethod::kGet, "/metrics", [this](const HttpRequest&, HttpResponse& res) {
    requests_[kMetrics].fetch_add(1, std::memory_order_relaxed);
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  // Runs for every response >= 400: ours, the router's (unknown path or method) and the
  // listener's (body over the limit, too many headers).
  h.on_error([this](const HttpRequest&, HttpResponse& res) {
    if (res.status == 413) {
      // Every bad registration body is a 400 naming the field (docs/CONFIG.md, the bootstrap
      // server); an oversized one names `body`.
      count_error(413);
      return reply_error(
          res, 400, "body",
          fmt::format("body exceeds the limit of {} bytes", options_.max_body_bytes));
    }
    count_error(res.status);
  });
}

std::string BootstrapServer::metrics_text() const {
  static const char* kRequestNames[] = {"route_put", "route_get",        "route_delete",  "health",
                                        "metrics",   "register_dp_rank", "query_dp_ranks"};
  static_assert(std::size(kRequestNames) == kNumRequestKinds);
  static const char* kErrorNames[] = {"bad_request", "unauthorized",       "not_found",
                                      "conflict",    "method_not_allowed", "payload_too_large",
                                      "internal"};
  static_assert(std::size(kErrorNames) == kNumErrors);
  std::string out;
  out += "# HELP pdkv_bootstrap_registered_ranks Prefill ranks currently registered.\n";
  out += "# TYPE pdkv_bootstrap_registered_ranks gauge\n";
  size_t registered = 0;
  for (const RouteTable& table : stage_tables_) registered += table.size();
  out += fmt::format("pdkv_bootstrap_registered_ranks {}\n", registered);
  out += "# HELP pdkv_bootstrap_requests_total Requests served, by endpoint.\n";
  out += "# TYPE pdkv_bootstrap_requests_total counter\n";
  for (int i = 0; i < kNumRequestKinds; ++i) {
    out += fmt::format("pdkv_bootstrap_requests_total{{endpoint=\"{}\"}} {}\n", kRequestNames[i],
                       requests_[i].load(std::memory_order_relaxed));
  }
  out += "# HELP pdkv_bootstrap_errors_total Error responses, by kind.\n";
  out += "# TYPE pdkv_bootstrap_errors_total counter\n";
  for (int i = 0; i < kNumErrors; ++i) {
    out += fmt::format("pdkv_bootstrap_errors_total{{kind=\"{}\"}} {}\n", kErrorNames[i],
                       errors_[i].load(std::memory_order_relaxed));
  }
  return out;
}

}  // namespace pdkv::bootstrap
