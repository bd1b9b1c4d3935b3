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
// Thread safety: const methods, each call opens its own connection, so one client may be
// used from many threads.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "bootstrap/registration.h"
#include "bootstrap/route_table.h"
#include "common/clock.h"
#include "common/cluster_key.h"
#include "common/status.h"

namespace pdkv::bootstrap {

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds read_timeout{3000};
  // Set: every request carries a signed X-Pdkv-Auth header (request_auth.h).
  std::shared_ptr<const ClusterKey> cluster_key;
};

class BootstrapClient {
 public:
  BootstrapClient(std::string host, int port, ClientOptions options = {});
  // "host:port" (IPv6 as "[addr]:port"); kInvalidArgument if malformed.
  static Result<BootstrapClient> from_address(std::string_view address, ClientOptions options = {});

  Status register_rank(const PrefillRegistration& reg, TimePoint deadline) const;
  Result<InstanceLayout> parallel_info(TimePoint deadline) const;
  // tp_rank inside dp_group.
  Result<RankEndpoint> rank(int64_t dp_group, int64_t tp_rank, TimePoint deadline) const;
  // All ranks of the group, in tp_rank order.
  Result<std::vector<RankEndpoint>> group(int64_t dp_group, TimePoint deadline) const;
  Status deregister(int64_t dp_group, int64_t tp_rank) const;
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
  Answer request(const char* method, const std::string& path, const std::string& body,
                 std::chrono::milliseconds read_timeout) const;
  // Retries until an answer that is final for this call, or the deadline.
  Result<std::string> call(const char* method, const std::string& path, const std::string& body,
                           bool retry_not_found, TimePoint deadline) const;

  std::string host_;
  int port_;
  ClientOptions options_;
};

}  // namespace pdkv::bootstrap
