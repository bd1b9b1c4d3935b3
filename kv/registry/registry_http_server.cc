#include "kv/registry/registry_http_server.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bootstrap/route_table.h"
#include "bootstrap/server.h"
#include "common/logging.h"
#include "common/stop_signals.h"
#include "http/http_replies.h"
#include "kv/registry/registry_options.h"

namespace pdkv::kv {
namespace {

using http::http_status_of;
using http::HttpMethod;
using http::HttpRequest;
using http::HttpResponse;
using http::reply_error;
using nlohmann::json;

bool query_int(const HttpRequest& req, HttpResponse& res, const char* name, int64_t* out) {
  const std::string v = req.param(name);
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) {
    reply_error(res, 400, name,
                fmt::format("query parameter '{}' is missing or not an integer", name));
    return false;
  }
  return true;
}

// The request's body as `parse` reads it; a body it refuses is answered 400 naming the
// field at fault (the bootstrap server's answers).
template <class T>
Result<T> parsed_body(const HttpRequest& req, HttpResponse& res,
                      Result<T> (*parse)(std::string_view, std::string*)) {
  std::string field;
  Result<T> parsed = parse(req.body, &field);
  if (!parsed.ok()) reply_error(res, 400, field, parsed.status().message());
  return parsed;
}

}  // namespace

Status RegistryHttpOptions::check() const {
  bootstrap::ServerOptions same;
  same.cluster_key = cluster_key;
  same.authenticate_reads = authenticate_reads;
  return same.check();
}

Result<std::unique_ptr<RegistryHttpServer>> RegistryHttpServer::start(EtcdRouteWatcher& watcher,
                                                                      std::string instance,
                                                                      const std::string& host,
                                                                      int port) {
  RegistryHttpOptions options;
  options.host = host;
  options.port = port;
  return start(watcher, std::move(instance), options);
}

Result<std::unique_ptr<RegistryHttpServer>> RegistryHttpServer::start(
    EtcdRouteWatcher& watcher, std::string instance, const RegistryHttpOptions& options) {
  PDKV_RETURN_IF_ERROR(options.check());
  std::unique_ptr<RegistryHttpServer> s(
      new RegistryHttpServer(watcher, std::move(instance), options));
  // Bodies are the DP-rank routes' (at most kMaxRoomsPerQuery rooms): the bootstrap
  // server's limit.
  http::HttpListenerOptions listen{"bootstrap-etcd", options.host, options.port,
                                   bootstrap::kMaxBodyBytes};
  http::HttpRouter router("bootstrap-etcd");
  s->install_routes(router);
  PDKV_ASSIGN_OR_RETURN(s->listener_, http::HttpListener::start(listen, std::move(router)));
  return s;
}

RegistryHttpServer::~RegistryHttpServer() { stop(); }

void RegistryHttpServer::stop() {
  if (listener_) listener_->stop();
}

bool RegistryHttpServer::admitted(Endpoint endpoint, bool write, const HttpRequest& req,
                                  HttpResponse& res) {
  requests_[endpoint].fetch_add(1, std::memory_order_relaxed);
  if (!options_.cluster_key || (!write && !options_.authenticate_reads)) return true;
  Status st = verifier_.verify(*options_.cluster_key, req.headers.get(bootstrap::kAuthHeader),
                               req.method_name, req.target, req.body, bootstrap::unix_now_ms());
  if (st.ok()) return true;
  refused_.fetch_add(1, std::memory_order_relaxed);
  PDKV_LOG_WARN_LIMITED("bootstrap-etcd: refused {} {} from {}: {}", req.method_name, req.path,
                        req.remote_addr, st.message());
  reply_error(res, 401, "", st.message());
  res.headers.add(bootstrap::kServerIdHeader, bootstrap::server_id_text(id_));
  return false;
}

void RegistryHttpServer::install_routes(http::HttpRouter& h) {
  // The router turns an exception into a 500 (http_router.h).
  h.on(HttpMethod::kGet, "/route", [this](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(kRouteGet, false, req, res)) return;
    int64_t rank = 0, group = 0;
    if (!query_int(req, res, "engine_rank", &rank) ||
        !query_int(req, res, "target_dp_group", &group))
      return;
    std::string why;
    auto snapshot = watcher_.snapshot(&why);
    if (!snapshot) return reply_error(res, 503, "", why);
    // The instance's entries through the server's own table: the same layout rule,
    // the same lookups, the same answers.
    bootstrap::RouteTable table;
    for (const auto& [engine_rank, reg] : (*snapshot)[instance_]) {
      Status st = table.register_rank(reg);
      if (!st.ok()) PDKV_LOG_WARN("bootstrap-etcd: {}", st.message());
    }
    if (rank == -1 && group == -1) {
      auto layout = table.layout();
      if (!layout)
        return reply_error(res, 404, "",
                           "no prefill rank of instance " + instance_ + " is in etcd");
      return res.set_content(fmt::format("{{{},\"registered_ranks\":{}}}",
                                         bootstrap::layout_to_json_fields(*layout), table.size()),
                             "application/json");
    }
    if (rank == -1) {
      auto ranks = table.group(group);
      if (!ranks.ok())
        return reply_error(res, http_status_of(ranks.status()), "target_dp_group",
                           ranks.status().message());
      json list = json::array();
      for (const auto& e : *ranks)
        list.push_back(json{{"engine_rank", e.engine_rank},
                            {"tp_rank", e.tp_rank},
                            {"rank_ip", e.rank_ip},
                            {"rank_port", e.rank_port}});
      return res.set_content(json{{"dp_group", group}, {"ranks", list}}.dump(), "application/json");
    }
    auto e = table.lookup(group, rank);
    if (!e.ok()) return reply_error(res, http_status_of(e.status()), "", e.status().message());
    res.set_content(json{{"rank_ip", e->rank_ip}, {"rank_port", e->rank_port}}.dump(),
                    "application/json");
  });
  h.on(HttpMethod::kGet, "/instances", [this](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(kInstances, false, req, res)) return;
    std::string why;
    auto snapshot = watcher_.snapshot(&why);
    if (!snapshot) return reply_error(res, 503, "", why);
    json out = json::object();
    for (const auto& [instance, ranks] : *snapshot) {
      json list = json::array();
      for (const auto& [engine_rank, reg] : ranks)
        list.push_back(json{
            {"engine_rank", engine_rank}, {"rank_ip", reg.rank_ip}, {"rank_port", reg.rank_port}});
      out[instance] = list;
    }
    res.set_content(out.dump(), "application/json");
  });
  h.on(HttpMethod::kPost, "/register_dp_rank", [this](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(kRegisterDpRank, true, req, res)) return;
    auto entry = parsed_body(req, res, bootstrap::parse_room_dp_rank);
    if (!entry.ok()) return;
    // Checked against the instance when a rank of it is in etcd, as the bootstrap server
    // checks it: a rank outside it would send the decode to a group that does not exist.
    if (auto snapshot = watcher_.snapshot(); snapshot) {
      auto ranks = snapshot->find(instance_);
      if (ranks != snapshot->end() && !ranks->second.empty()) {
        const int64_t dp_size = ranks->second.begin()->second.layout.dp_size;
        if (auto why = bootstrap::dp_rank_outside(entry->dp_rank, dp_size))
          return reply_error(res, 400, "dp_rank", *why);
      }
    }
    room_dp_ranks_.put(*entry, req.remote_addr);
    res.set_content("OK", "text/plain");
  });
  h.on(HttpMethod::kPost, "/query_dp_ranks", [this](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(kQueryDpRanks, false, req, res)) return;
    auto rooms = parsed_body(req, res, bootstrap::parse_room_query);
    if (!rooms.ok()) return;
    res.set_content(bootstrap::room_query_answer(room_dp_ranks_.find(*rooms)), "application/json");
  });
  h.on(HttpMethod::kGet, "/metrics", [this](const HttpRequest&, HttpResponse& res) {
    requests_[kMetrics].fetch_add(1, std::memory_order_relaxed);
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  h.on(HttpMethod::kGet, "/health", [this](const HttpRequest&, HttpResponse& res) {
    requests_[kHealth].fetch_add(1, std::memory_order_relaxed);
    // The id members sign their requests for; public, like the bootstrap server's.
    res.headers.add(bootstrap::kServerIdHeader, bootstrap::server_id_text(id_));
    std::string why;
    if (!watcher_.snapshot(&why)) return reply_error(res, 503, "", why);
    res.set_content("OK", "text/plain");
  });
  auto read_only = [](const HttpRequest& req, HttpResponse& res) {
    reply_error(res, 405, "",
                fmt::format("{} /route: this server reads routes from etcd; prefill ranks "
                            "register there themselves (PDKV_REGISTRY=etcd)",
                            req.method_name));
  };
  h.on(HttpMethod::kPut, "/route", read_only);
  h.on(HttpMethod::kDelete, "/route", read_only);
  h.on(HttpMethod::kPost, "/route", read_only);
}

std::string RegistryHttpServer::metrics_text() const {
  static const char* kNames[] = {"route_get",      "instances", "register_dp_rank",
                                 "query_dp_ranks", "health",    "metrics"};
  static_assert(std::size(kNames) == kNumEndpoints);
  size_t ranks = 0;
  if (auto snapshot = watcher_.snapshot(); snapshot) {
    auto it = snapshot->find(instance_);
    if (it != snapshot->end()) ranks = it->second.size();
  }
  // The bootstrap server's metric names, so one dashboard reads either server.
  std::string out;
  out += "# HELP pdkv_bootstrap_registered_ranks Prefill ranks of the instance in etcd.\n";
  out += "# TYPE pdkv_bootstrap_registered_ranks gauge\n";
  out += fmt::format("pdkv_bootstrap_registered_ranks {}\n", ranks);
  out += "# HELP pdkv_bootstrap_requests_total Requests served, by endpoint.\n";
  out += "# TYPE pdkv_bootstrap_requests_total counter\n";
  for (int i = 0; i < kNumEndpoints; ++i) {
    out += fmt::format("pdkv_bootstrap_requests_total{{endpoint=\"{}\"}} {}\n", kNames[i],
                       requests_[i].load(std::memory_order_relaxed));
  }
  out += "# HELP pdkv_bootstrap_errors_total Error responses, by kind.\n";
  out += "# TYPE pdkv_bootstrap_errors_total counter\n";
  out += fmt::format("pdkv_bootstrap_errors_total{{kind=\"unauthorized\"}} {}\n",
                     refused_.load(std::memory_order_relaxed));
  return out;
}

int run_registry_http_server(const std::string& host, int port, const std::string& instance,
                             const std::string& secret_file, bool authenticate_reads) {
  StopSignals signals;  // before the watcher's and the server's threads exist
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "pdkv bootstrap: %s\n", st.to_string().c_str());
    return 1;
  };
  Result<RegistryOptions> options = RegistryOptions::from_env();
  if (!options.ok()) return fail(options.status());
  auto key = secret_file.empty() ? ClusterKey::from_env() : ClusterKey::from_file(secret_file);
  if (!key.ok()) return fail(key.status());
  RegistryHttpOptions http_options;
  http_options.host = host;
  http_options.port = port;
  http_options.cluster_key = *key;
  http_options.authenticate_reads = authenticate_reads;
  if (Status usable = http_options.check(); !usable.ok()) {
    std::fprintf(stderr, "pdkv bootstrap: --authenticate-reads: %s\n", usable.message().c_str());
    return 2;
  }
  if (!*key) warn_unauthenticated("bootstrap-etcd (routes in etcd are not verified)");
  Result<EtcdAccess> access = etcd_access_from(*options);
  if (!access.ok()) return fail(access.status());
  Result<std::shared_ptr<EtcdClient>> client =
      EtcdClient::create(options->etcd_endpoints, std::move(*access));
  if (!client.ok()) return fail(client.status());
  EtcdRouteWatcher watcher(*client, options->etcd_prefix, *key);
  auto server = RegistryHttpServer::start(watcher, instance, http_options);
  if (!server.ok()) return fail(server.status());
  std::printf("pdkv bootstrap listening on %s:%d (routes of %s from %s, prefix %s)\n", host.c_str(),
              (*server)->port(), instance.c_str(), (*client)->description().c_str(),
              options->etcd_prefix.c_str());
  std::fflush(stdout);
  const int sig = signals.wait();
  PDKV_LOG_INFO("bootstrap-etcd: signal {}, shutting down", sig);
  (*server)->stop();
  return 0;
}

}  // namespace pdkv::kv
