// The path channel: how two engines of the automatic transport choice (PDKV_ENGINE_BACKEND
// unset or `auto`) learn, before any byte moves, where the other runs and which backends it
// offers, so the sender can pick the fastest path (path_table.h). It is the engine's
// endpoint: each backend listens on a port of its own, advertised here.
//
//   sender   -> receiver  (with a cluster secret: the session handshake, kPathChannel)
//   sender   -> kPathHello  its locality, a fresh challenge, its offers
//   receiver -> kPathHello  its locality, the challenge copied into a proof slot in its
//                           memory and the slot's address, its offers
//   (the sender reads the slot: locality.h)
//   sender   -> kPathChoice the path it took and why no faster one was possible
// The slot lives until the receiver read the choice (or the connection ended), so the
// proof works only during this handshake. Frames are the lease channel's (lease/wire.h);
// nothing but the handshake is read from a peer that has not proven the secret, and every
// step is bounded by the step timeout.
//
// Threads: PathServer owns an acceptor and one thread per connection (at most
// max_connections; more are closed at accept). Thread safety: listen() once; the
// destructor stops and joins every thread. PathClient: one thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster_key.h"
#include "common/mutex.h"
#include "common/status.h"
#include "engine/lease/wire.h"
#include "engine/path/path_messages.h"

namespace pdkv::engine {

struct PathServerOptions {
  std::shared_ptr<const ClusterKey> cluster_key;
  int step_timeout_ms = 3000;
  int max_connections = 64;
};

class PathServer {
 public:
  // What this engine says about itself (offers, device destinations), asked per session.
  using HelloSource = std::function<PathHello()>;
  // A sender told which path it took to this engine (peer hello, its choice).
  using ChoiceSink = std::function<void(const PathHello& peer, const PathChoice& choice)>;

  PathServer(PathServerOptions options, HelloSource hello, ChoiceSink sink);
  ~PathServer();
  PathServer(const PathServer&) = delete;
  PathServer& operator=(const PathServer&) = delete;

  // Binds host:port and starts accepting; returns "host:port".
  Result<std::string> listen(const std::string& host, int port);
  // The same in two steps, for an owner whose HelloSource needs the endpoint: bind()
  // returns it, start() accepts (connections queue in the backlog until then).
  Result<std::string> bind(const std::string& host, int port);
  void start();

 private:
  struct Conn {
    lease::Socket sock;
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  void accept_loop();
  void serve(Conn* conn);
  Status exchange(lease::Socket& sock);

  const PathServerOptions options_;
  const HelloSource hello_;
  const ChoiceSink sink_;
  lease::Socket listener_;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  Mutex conns_mu_;
  std::vector<std::unique_ptr<Conn>> conns_ PDKV_GUARDED_BY(conns_mu_);
};

class PathClient {
 public:
  // Connects, authenticates (key set) and exchanges hellos; `mine` carries a fresh
  // challenge. Unavailable if nothing answers; Unauthenticated on a secret mismatch;
  // FailedPrecondition when the peer does not speak the path channel (a fixed backend).
  Result<PathHello> exchange(const std::string& endpoint, const PathHello& mine,
                             const ClusterKey* key, int timeout_ms);
  // Tells the receiver the choice (best effort) and closes.
  void finish(const PathChoice& choice, int timeout_ms);

 private:
  lease::Socket sock_;
};

}  // namespace pdkv::engine
