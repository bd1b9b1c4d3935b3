// EtcdClient: the few etcd v3 calls the route registry needs (leases, a guarded put,
// prefix range, prefix watch), over etcd's JSON gRPC gateway (`/v3/...`, keys and values
// base64) with cpp-httplib.
//
// Why the gateway and not a client library: Debian 12 ships no maintained C++ etcd client
// (etcd-cpp-apiv3 is not packaged), and its gRPC (libgrpc++-dev 1.51) would need etcd's
// .proto files and protoc code generation in the build for six calls. The gateway is part
// of every etcd 3.4+ server, speaks the same API (same semantics, revisions, leases and
// watch streams) and needs only cpp-httplib and nlohmann::json, which pdkv already uses.
// base64 comes from libsodium (sodium_bin2base64), not a codec of ours.
//
// Failover: every call tries the endpoint that last answered first, then the others in
// turn, with backoff, until its deadline. An endpoint "fails" on a transport error, a 5xx,
// or an etcd error that another member may not have (no leader, leader changed,
// Unavailable). Requests carry `Grpc-Metadata-hasleader: true` so that a member cut off
// from its cluster refuses (and a watch on it ends) instead of serving stale data.
//
// Access control (etcd_access.h): with a CA every endpoint is reached over TLS (its
// certificate verified, a client certificate shown if given); with a user, the client
// authenticates first (/v3/auth/authenticate) and sends etcd's token with every request,
// authenticating again, once per call, when etcd says the token is invalid (expired).
//
// Errors: kUnavailable (no endpoint answered before the deadline; the message names etcd,
// the endpoints and the last error), kDataLoss (an answer that does not parse),
// kInvalidArgument (bad endpoints list), kFailedPrecondition (etcd refused the request).
//
// Thread safety: every method may be called from any thread; each call opens its own
// connection. A WatchStream is driven by one thread and cancelled from any other.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "kv/registry/etcd_access.h"
#include "kv/registry/etcd_types.h"

namespace httplib {
class Client;
}

namespace pdkv::kv {

// Longest accepted answer / watch message: values here are small JSON documents; a peer
// sending more is broken or hostile.
inline constexpr size_t kMaxEtcdAnswerBytes = 16u << 20;

// The first key after every key starting with `prefix` (etcd's range_end for a prefix).
std::string etcd_prefix_end(const std::string& prefix);

class EtcdClient {
 public:
  // `endpoints`: "host:port,host:port" (IPv6 as "[addr]:port"); at least one.
  static Result<std::shared_ptr<EtcdClient>> create(
      const std::string& endpoints,
      std::chrono::milliseconds request_timeout = std::chrono::milliseconds(2000));
  // The same, reaching etcd with `access` (an "https://" endpoint needs access.ca_file).
  static Result<std::shared_ptr<EtcdClient>> create(
      const std::string& endpoints, EtcdAccess access,
      std::chrono::milliseconds request_timeout = std::chrono::milliseconds(2000));

  // A new lease of `ttl_s` seconds; its id.
  Result<int64_t> grant_lease(int64_t ttl_s, TimePoint deadline);
  // Renews the lease once; the TTL it has now, 0 when it no longer exists (expired).
  Result<int64_t> keep_alive(int64_t lease, TimePoint deadline);
  // The seconds the lease has left without renewing it, -1 when it no longer exists.
  Result<int64_t> lease_time_to_live(int64_t lease, TimePoint deadline);
  // Revokes the lease, deleting its keys at once; OK when it no longer exists.
  Status revoke_lease(int64_t lease, TimePoint deadline);
  // Deletes `key`; OK when it did not exist.
  Status delete_key(const std::string& key, TimePoint deadline);
  // Every key starting with `prefix`, at one revision.
  Result<EtcdRange> range_prefix(const std::string& prefix, TimePoint deadline);
  // Puts key=value under `lease` (0 = none) if no key starting with `guard_prefix` was
  // modified after `revision` (the optimistic check of a read-check-write); false when
  // the guard failed (someone wrote meanwhile: read and check again).
  Result<bool> put_if_unchanged(const std::string& guard_prefix, int64_t revision,
                                const std::string& key, const std::string& value, int64_t lease,
                                TimePoint deadline);

  // One cheap linearizable read on member `endpoint` (an index into the endpoints): OK
  // when it answers within `timeout` and has a leader. No failover: it tests that member.
  Status probe(size_t endpoint, std::chrono::milliseconds timeout);

  // "etcd at 127.0.0.1:2379,127.0.0.1:2380": how messages name the cluster.
  const std::string& description() const { return description_; }

  class WatchStream;
  // A watch of every key starting with `prefix` from `start_revision` on.
  std::unique_ptr<WatchStream> watch(const std::string& prefix, int64_t start_revision);

  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

 private:
  struct Endpoint {
    std::string host;
    int port = 0;
  };
  EtcdClient(std::vector<Endpoint> endpoints, EtcdAccess access,
             std::chrono::milliseconds request_timeout);
  // POSTs `body` to `path`, failing over between endpoints until the deadline. With a
  // user and `with_token`, carries the token (fetched first if there is none).
  Result<std::string> call(const std::string& path, const std::string& body, TimePoint deadline,
                           bool with_token = true);
  // A client for one request to `ep`: plain, or TLS with the access's files.
  std::unique_ptr<httplib::Client> connect(const Endpoint& ep) const;
  // Fetches a new token for the user.
  Status authenticate(TimePoint deadline) PDKV_EXCLUDES(token_mu_);
  // The current token ("" without a user or before the first authentication).
  std::string token() const PDKV_EXCLUDES(token_mu_);

  const std::vector<Endpoint> endpoints_;
  const EtcdAccess access_;
  mutable Mutex token_mu_;
  std::string token_ PDKV_GUARDED_BY(token_mu_);
  const std::chrono::milliseconds request_timeout_;
  const std::string description_;
  std::atomic<size_t> preferred_{0};  // index of the endpoint that answered last
};

// One watch stream. run() connects to one endpoint after another and delivers events
// until the stream ends; the caller re-reads and watches again (the revision to resume
// from may have been compacted). cancel() makes a running or later run() return.
class EtcdClient::WatchStream {
 public:
  using OnEvents = std::function<void(int64_t revision, const std::vector<EtcdEvent>& events)>;
  // `on_created` runs once the stream is established (the watch is in place: no event
  // after `start_revision` can be missed from then on).
  // Returns when the stream ended: kUnavailable (connection lost, member refused, or
  // cancelled), kDataLoss (malformed message), kOutOfRange (revision compacted).
  Status run(const std::function<void()>& on_created, const OnEvents& on_events);
  void cancel();
  // Ends the current connection only (run() returns kUnavailable): for a member found
  // silent while the stream waits, which a quiet watch cannot tell from no news.
  void drop();
  // Index of the member the stream is connected to, -1 when none.
  int endpoint() const;

 private:
  friend class EtcdClient;
  WatchStream(EtcdClient& client, std::string prefix, int64_t start_revision);

  EtcdClient& client_;
  const std::string prefix_;
  const int64_t start_revision_;
  std::atomic<bool> cancelled_{false};
  mutable Mutex mu_;
  int socket_ PDKV_GUARDED_BY(mu_) = -1;  // dup of run()'s connection, to shut it down
  int endpoint_ PDKV_GUARDED_BY(mu_) = -1;
};

}  // namespace pdkv::kv
