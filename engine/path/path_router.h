// PathRouter: the backends of one TransferEngine and the choice of one of them per peer.
//
// Fixed (EngineOptions::backend names one): that backend alone, its endpoint the engine's,
// every peer on its path (path_table.h: fixed_backend_path).
// Automatic ("auto"): every backend this binary has is started, each on a port of its own
// (tcp must start; shm and ucx are skipped with the reason when they cannot), and a
// PathServer (path_channel.h) on the engine's host:port tells peers about them. connect()
// asks the peer's path channel, proves locality, picks the fastest row of the path table
// for host sources (and, when this engine holds device sources, for those too) and
// connects that backend. EngineOptions::require_path refuses a peer below the named path.
//
// Every choice (and each peer's choice for its writes into this engine) is logged at info
// once per peer and path, and kept for reports(): the metric pdkv_peer_path and the KV
// manager's peer_paths() read it.
//
// Thread safety: connect(), reports() and the hooks may be called from any thread after
// listen(); the backends' own rules hold for them.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/backend.h"
#include "engine/path/path_channel.h"
#include "engine/path/path_kind.h"
#include "engine/path/path_table.h"
#include "engine/path/peer_path.h"

namespace pdkv::engine {

class PathRouter {
 public:
  struct Route {
    Backend* backend = nullptr;
    std::shared_ptr<BackendPeer> peer;
    PathKind path = PathKind::kTcp;
  };
  struct Routes {
    Route host;    // for batches reading host memory
    Route device;  // for batches reading device memory; backend null when not opened
  };

  // `ctx` is the engine's (its options are this engine's). `has_device_destinations`
  // says whether peer-writable device memory is registered now (advertised to peers).
  static Result<std::unique_ptr<PathRouter>> create(const BackendContext& ctx,
                                                    std::function<bool()> has_device_destinations);
  ~PathRouter();

  // Starts every backend and (automatic) the path channel; returns the engine endpoint.
  Result<std::string> listen();
  bool automatic() const { return automatic_; }
  std::string_view name() const;
  const std::vector<std::unique_ptr<Backend>>& backends() const { return backends_; }

  // `device_sources`: also open the route for batches that read device memory here.
  Result<Routes> connect(const std::string& endpoint, bool device_sources);

  std::vector<PeerPath> reports() const;

 private:
  PathRouter(const BackendContext& ctx, std::function<bool()> has_device_destinations);
  Status start_backends();
  PathHello my_hello() const;
  Result<Route> open_route(const std::string& endpoint, const PathHello& peer,
                           const LocalityVerdict& verdict, bool device_sources, PathChoice* told,
                           const Route* reuse);
  Result<Routes> connect_fixed(const std::string& endpoint, bool device_sources);
  void record(PeerPath report);

  const BackendContext ctx_;
  const std::function<bool()> has_device_destinations_;
  bool automatic_ = false;
  std::optional<PathKind> floor_;
  // Per backend: its own options (its port), kept alive for its lifetime.
  std::vector<std::unique_ptr<EngineOptions>> backend_options_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<LocalBackend> local_;
  std::vector<std::pair<std::string_view, std::string>> unavailable_;
  std::vector<PathOffer> offers_;  // immutable after listen()
  std::string endpoint_;
  mutable Mutex reports_mu_;
  // Keyed by (peer, outgoing, device_sources).
  std::map<std::tuple<std::string, bool, bool>, PeerPath> reports_ PDKV_GUARDED_BY(reports_mu_);
  std::unique_ptr<PathServer> server_;  // last: its threads call record()
};

}  // namespace pdkv::engine
