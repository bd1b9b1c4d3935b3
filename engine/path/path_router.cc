#include "engine/path/path_router.h"

#include <cstdlib>

#include "common/config.h"
#include "common/logging.h"
#include "engine/backends/ucx/ucx_settings.h"
#include "engine/path/locality.h"

namespace pdkv::engine {
namespace {

// The backends an automatic engine tries to start, in the order they are offered.
constexpr std::string_view kAutoBackends[] = {"tcp", "shm", "ucx"};

LocalityChallenge fresh_challenge() {
  const ClusterKey::Nonce nonce = ClusterKey::random_nonce();
  LocalityChallenge c{};
  std::copy_n(nonce.begin(), c.size(), c.begin());
  return c;
}

}  // namespace

PathRouter::PathRouter(const BackendContext& ctx, std::function<bool()> has_device_destinations)
    : ctx_(ctx), has_device_destinations_(std::move(has_device_destinations)) {}

PathRouter::~PathRouter() {
  server_.reset();  // no handshake may record into the tables below any more
  backends_.clear();
}

Result<std::unique_ptr<PathRouter>> PathRouter::create(
    const BackendContext& ctx, std::function<bool()> has_device_destinations) {
  std::unique_ptr<PathRouter> r(new PathRouter(ctx, std::move(has_device_destinations)));
  const EngineOptions& o = *ctx.options;
  if (!o.require_path.empty()) {
    r->floor_ = parse_path(o.require_path);
    if (!r->floor_) {
      return invalid_argument("require_path '" + o.require_path +
                              "' is not a path (cuda_ipc, shm, ucx, tcp_staged, tcp)");
    }
  }
  r->automatic_ = o.backend == "auto";
  PDKV_RETURN_IF_ERROR(r->start_backends());
  return r;
}

std::string_view PathRouter::name() const {
  return automatic_ ? std::string_view("auto") : backends_.front()->capabilities().name;
}

Status PathRouter::start_backends() {
  if (!automatic_) {
    PDKV_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, make_backend(ctx_));
    local_.push_back({b->capabilities().name, b->capabilities()});
    backends_.push_back(std::move(b));
    return Status();
  }
  for (std::string_view name : kAutoBackends) {
    if (name == "ucx") {
      // Without a named fabric UCX takes TCP on hosts without RDMA, slower than pdkv's
      // own tcp (BENCHMARKS.md, P3): it joins the choice only when told its transports.
      Result<std::string> tls = config::read<ucx::kUcxTls>(ctx_.options->settings);
      const char* env_tls = std::getenv("UCX_TLS");
      if (tls.ok() && tls->empty() && (env_tls == nullptr || *env_tls == '\0')) {
        unavailable_.emplace_back(name,
                                  "PDKV_UCX_TLS (or UCX_TLS) names no transport: UCX joins the "
                                  "automatic choice only for a fabric it is told to use");
        continue;
      }
    }
    auto options = std::make_unique<EngineOptions>(*ctx_.options);
    options->backend = std::string(name);
    options->port = 0;  // the engine's own port is the path channel's
    BackendContext ctx = ctx_;
    ctx.options = options.get();
    Result<std::unique_ptr<Backend>> b = make_backend(ctx);
    if (!b.ok()) {
      // tcp is the path every peer can take; a malformed setting is the operator's error,
      // said at once rather than turned into a slower path.
      if (name == "tcp" || b.status().code() == StatusCode::kInvalidArgument) return b.status();
      unavailable_.emplace_back(name, b.status().message());
      continue;
    }
    if (ctx_.options->cluster_key && !(*b)->capabilities().authenticates_sessions) {
      unavailable_.emplace_back(name, "does not authenticate its sessions");
      continue;
    }
    local_.push_back({(*b)->capabilities().name, (*b)->capabilities()});
    backend_options_.push_back(std::move(options));
    backends_.push_back(std::move(*b));
  }
  return Status();
}

Result<std::string> PathRouter::listen() {
  if (!automatic_) {
    PDKV_ASSIGN_OR_RETURN(endpoint_, backends_.front()->listen());
    return endpoint_;
  }
  for (size_t i = 0; i < backends_.size(); ++i) {
    PDKV_ASSIGN_OR_RETURN(std::string ep, backends_[i]->listen());
    const BackendCapabilities caps = backends_[i]->capabilities();
    offers_.push_back(
        {std::string(caps.name), ep, caps.device_destination != DeviceSupport::kNone});
  }
  const EngineOptions& o = *ctx_.options;
  server_ = std::make_unique<PathServer>(
      PathServerOptions{o.cluster_key, o.connect_timeout_ms, o.tcp.max_connections},
      [this] { return my_hello(); },
      [this](const PathHello& peer, const PathChoice& choice) {
        record({peer.endpoint, false, false, choice.path, choice.why});
      });
  // Bound first, served after: my_hello() reads endpoint_ on the server's threads.
  PDKV_ASSIGN_OR_RETURN(endpoint_, server_->bind(o.host, o.port));
  server_->start();
  std::string offered;
  for (const PathOffer& offer : offers_) offered += " " + offer.backend + "@" + offer.endpoint;
  for (const auto& [name, why] : unavailable_)
    offered += " (" + std::string(name) + ": " + why + ")";
  PDKV_LOG_INFO("transfer engine: path channel on {}, offering{}", endpoint_, offered);
  return endpoint_;
}

PathHello PathRouter::my_hello() const {
  PathHello h;
  h.endpoint = endpoint_;
  h.locality = local_locality();
  h.device_destinations = has_device_destinations_ && has_device_destinations_();
  h.offers = offers_;
  return h;
}

Result<PathRouter::Routes> PathRouter::connect(const std::string& endpoint, bool device_sources) {
  if (!automatic_) return connect_fixed(endpoint, device_sources);
  PathHello mine = my_hello();
  mine.challenge = fresh_challenge();
  PathClient client;
  const int timeout_ms = ctx_.options->connect_timeout_ms;
  PDKV_ASSIGN_OR_RETURN(
      PathHello peer, client.exchange(endpoint, mine, ctx_.options->cluster_key.get(), timeout_ms));
  const LocalityVerdict verdict =
      prove_locality(mine.locality, peer.locality, peer.proof_addr, mine.challenge);
  PathChoice told;
  Result<Route> host = open_route(endpoint, peer, verdict, false, &told, nullptr);
  if (!host.ok()) {
    client.finish(PathChoice{PathKind::kTcp, "refused: " + host.status().message()}, timeout_ms);
    return host.status();
  }
  client.finish(told, timeout_ms);
  Routes routes{std::move(*host), Route{}};
  if (device_sources) {
    PathChoice unused;
    PDKV_ASSIGN_OR_RETURN(Route device,
                          open_route(endpoint, peer, verdict, true, &unused, &routes.host));
    routes.device = std::move(device);
  }
  return routes;
}

Result<PathRouter::Route> PathRouter::open_route(const std::string& endpoint, const PathHello& peer,
                                                 const LocalityVerdict& verdict,
                                                 bool device_sources, PathChoice* told,
                                                 const Route* reuse) {
  PathInputs in{verdict, device_sources, peer.device_destinations,
                local_,  peer.offers,    unavailable_};
  Result<PathDecision> decision = choose_path(in, floor_);
  if (!decision.ok()) {
    PDKV_LOG_WARN_LIMITED("transfer engine: peer {} refused: {}", endpoint,
                          decision.status().message());
    return decision.status().with_context(endpoint);
  }
  Backend* backend = nullptr;
  for (auto& b : backends_) {
    if (b->capabilities().name == decision->backend) backend = b.get();
  }
  std::string peer_endpoint;
  for (const PathOffer& o : peer.offers) {
    if (o.backend == decision->backend) peer_endpoint = o.endpoint;
  }
  *told = PathChoice{decision->path, decision->why};
  record({endpoint, true, device_sources, decision->path, decision->why});
  // tcp and tcp_staged are one backend: the device route shares the host route's session.
  if (reuse != nullptr && reuse->backend == backend) {
    return Route{backend, reuse->peer, decision->path};
  }
  PDKV_ASSIGN_OR_RETURN(std::unique_ptr<BackendPeer> bp, backend->connect(peer_endpoint));
  return Route{backend, std::shared_ptr<BackendPeer>(std::move(bp)), decision->path};
}

Result<PathRouter::Routes> PathRouter::connect_fixed(const std::string& endpoint,
                                                     bool device_sources) {
  Backend* backend = backends_.front().get();
  const std::string_view name = backend->capabilities().name;
  const std::string why = "PDKV_ENGINE_BACKEND=" + std::string(name) + " names this backend only";
  for (bool device : {false, true}) {
    if (device && !device_sources) break;
    const PathKind path = fixed_backend_path(name, device);
    if (floor_ && !at_least(path, *floor_)) {
      return failed_precondition(endpoint + ": path " + std::string(path_name(path)) +
                                 " is below the required " + std::string(path_name(*floor_)) +
                                 " (PDKV_ENGINE_REQUIRE_PATH): " + why);
    }
  }
  PDKV_ASSIGN_OR_RETURN(std::unique_ptr<BackendPeer> bp, backend->connect(endpoint));
  Route host{backend, std::shared_ptr<BackendPeer>(std::move(bp)), fixed_backend_path(name, false)};
  record({endpoint, true, false, host.path, why});
  Routes routes{host, Route{}};
  if (device_sources) {
    routes.device = Route{backend, host.peer, fixed_backend_path(name, true)};
    record({endpoint, true, true, routes.device.path, why});
  }
  return routes;
}

void PathRouter::record(PeerPath report) {
  bool changed = false;
  {
    MutexLock lock(reports_mu_);
    auto key = std::make_tuple(report.peer, report.outgoing, report.device_sources);
    auto it = reports_.find(key);
    changed = it == reports_.end() || it->second.path != report.path;
    reports_[key] = report;
  }
  if (!changed) return;  // once per peer and path: reconnects do not repeat it
  PDKV_LOG_INFO("transfer engine: {} {} over {}{}{}{}",
                report.outgoing ? "writing to" : "written by", report.peer, path_name(report.path),
                report.device_sources ? " (device sources)" : "",
                report.why.empty() ? "" : "; faster paths impossible: ", report.why);
}

std::vector<PeerPath> PathRouter::reports() const {
  MutexLock lock(reports_mu_);
  std::vector<PeerPath> out;
  out.reserve(reports_.size());
  for (const auto& [key, report] : reports_) out.push_back(report);
  return out;
}

}  // namespace pdkv::engine
