// LeaseClient: the sending side of the control channel (see lease_server.h for why).
//
// connect() performs the handshake (with a cluster key, first the session handshake of
// lease_auth.h: the receiver must prove the secret before we send it anything else, and
// in particular before the backend writes into it); lease() asks the peer to validate one part's
// destinations and returns the grant (or the peer's OutOfRange verdict naming the
// entry); done() releases the lease and waits for the peer's acknowledgement, which is
// what makes "completion means applied and acknowledged" hold for one-sided writers.
//
// Thread safety: one thread at a time (the owning peer's sender thread); shutdown() may
// be called from any thread to wake it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/cluster_key.h"
#include "common/status.h"
#include "engine/lease/messages.h"
#include "engine/lease/wire.h"

namespace pdkv::engine::lease {

struct PeerHello {
  uint32_t pid = 0;
  std::string host_identity;
  int lease_ms = 0;
  std::string extra;  // backend-specific (LeaseSession::hello_extra)
};

class LeaseClient {
 public:
  LeaseClient() = default;
  LeaseClient(const LeaseClient&) = delete;
  LeaseClient& operator=(const LeaseClient&) = delete;

  // Unavailable if nothing answers within timeout_ms or the peer hangs up during the
  // handshake; FailedPrecondition if it runs another backend; Unauthenticated if either
  // end cannot prove the cluster secret (`key` null: we have none). Each handshake step
  // waits at most timeout_ms.
  Status connect(const std::string& endpoint, const std::string& backend_name, int timeout_ms,
                 const ClusterKey* key);
  const PeerHello& hello() const { return hello_; }

  // `dst_ranges` holds (dst, length) pairs of the part. Waits for the grant until deadline.
  Result<Grant> lease(uint64_t part_id, std::span<const uint64_t> dst_ranges, TimePoint deadline);
  Status done(uint64_t part_id, TimePoint deadline);
  // UCX only: fetches the peer's region table (DataLoss if it is malformed).
  Result<RegionTable> regions(TimePoint deadline);

  // True if the peer closed the connection or sent something unasked (it never speaks
  // while we hold a lease, so anything readable then means it is gone). Does not block.
  bool peer_closed() const;
  void shutdown() { sock_.shutdown_both(); }

 private:
  Socket sock_;
  PeerHello hello_;
  std::vector<uint8_t> buf_;
};

}  // namespace pdkv::engine::lease
