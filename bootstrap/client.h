// Client of the bootstrap server (server.h), for prefill ranks (register) and decode
// ranks (look up, health probe).
//
// Every call takes a deadline and retries with capped exponential backoff (50 ms
// doubling to 1 s) while the answer may still change: connection failures, 5xx, and for
// lookups 404 (rank not registered yet). Answers that will not change (400, 409) return
// at once. Errors: kInvalidArgument (400, message from the server, naming the field),
// kUnauthenticated (401: no or another cluster secret),
// kFailedPrecondition (409 layout conflict), kDeadlineExceeded (gave up; the message holds
// the last answer), kDataLoss (malformed answer).
//
// With a cluster key, requests are signed for one server instance (request_auth.h): the
// client learns the server's id from GET /health before its first signed request, and
// again when a 401 names another id (the server restarted), retrying that request once.
//
// Interrupt (common/interrupt.h): a lookup given one returns kAborted soon after it fires:
// its backoff sleeps end, and a request waiting for its answer has its connection shut
// down. A connect in progress is not interrupted; it is bounded by connect_timeout.
//
// Thread safety: const methods, each call opens its own connection, so one client may be
// used from many threads; the learned server id is shared under a mutex (and by copies).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/registration.h"
#include "bootstrap/request_auth.h"
#include "bootstrap/route_table.h"
#include "common/clock.h"
#include "common/cluster_key.h"
#include "common/interrupt.h"
#include "common/mutex.h"
#include "common/status.h"

namespace pdkv::bootstrap {

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds read_timeout{3000};
  // Set: every request carries a signed X-Pdkv-Auth header (request_auth.h).
  std::shared_ptr<const ClusterKey> cluster_key;
  // The pipeline stage whose table lookups and removals read (server.h); 0 = the first,
  // the only one of an instance without pipeline parallelism.
  int64_t pp_rank = 0;
};

class BootstrapClient {
 public:
  BootstrapClient(std::string host, int port, ClientOptions options = {});
  // "host:port" (IPv6 as "[addr]:port"); kInvalidArgument if malformed.
  static Result<BootstrapClient> from_address(std::string_view address, ClientOptions options = {});

  Status register_rank(const PrefillRegistration& reg, TimePoint deadline) const;
  Result<InstanceLayout> parallel_info(TimePoint deadline,
                                       const Interrupt* interrupt = nullptr) const;
  // tp_rank inside dp_group.
  Result<RankEndpoint> rank(int64_t dp_group, int64_t tp_rank, TimePoint deadline,
                            const Interrupt* interrupt = nullptr) const;
  // All ranks of the group, in tp_rank order.
  Result<std::vector<RankEndpoint>> group(int64_t dp_group, TimePoint deadline) const;
  Status deregister(int64_t dp_group, int64_t tp_rank) const;
  // POST /register_dp_rank: which DP group of this instance serves `room` (for decodes
  // that ask rather than compute it). Signed like every write under a cluster key.
  Status register_room_dp_rank(uint64_t room, int64_t dp_group, TimePoint deadline) const;
  // One GET /health within `timeout`: OK or kUnavailable. No retry (heartbeats count).
  Status health(std::chrono::milliseconds timeout) const;

  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  struct Answer {
    int status = 0;  // 0 = no HTTP answer (connection failed)
    std::string body;
    std::string error;  // transport error text when status == 0
  };
  // "&target_pp_rank=N" for a client of a later pipeline stage, else "".
  std::string stage_query() const;
  Answer request(const char* method, const std::string& path, const std::string& body,
                 std::chrono::milliseconds read_timeout,
                 const Interrupt* interrupt = nullptr) const;
  // Retries until an answer that is final for this call, the deadline, or `interrupt`.
  Result<std::string> call(const char* method, const std::string& path, const std::string& body,
                           bool retry_not_found, TimePoint deadline,
                           const Interrupt* interrupt = nullptr) const;

  // The id of the server instance this client signs for, once learned.
  struct LearnedServer {
    Mutex mu;
    std::optional<ServerId> id PDKV_GUARDED_BY(mu);
  };
  std::optional<ServerId> known_server() const;
  void learn_server(const ServerId& id) const;

  std::string host_;
  int port_;
  ClientOptions options_;
  std::shared_ptr<LearnedServer> server_ = std::make_shared<LearnedServer>();
};

}  // namespace pdkv::bootstrap
