// UcxPeer: one session's UCP worker and endpoint, its unpacked rkeys and the part writer
// (see ucx_backend.h for the protocol). The worker is the peer's own: completions of its
// puts come back through that worker's shared-memory ring, which a receiver killed
// mid-message can wedge (ucx_worker.h); no other peer shares it. ep_, rkeys and ep_error_
// belong to the worker thread; the LeasedPeer sender thread hands parts over and waits
// for their flush.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "engine/backends/ucx/ucx_worker.h"
#include "engine/lease/leased_peer.h"

namespace pdkv::engine::ucx {

class UcxPeer final : public lease::LeasedPeer {
 public:
  UcxPeer(std::string endpoint, CompletionSink* sink, lease::LeasedPeerOptions options,
          std::unique_ptr<UcxWorker> worker, bool peer_err_mode);
  ~UcxPeer() override;

  // Creates the endpoint to the receiver's worker address; Unavailable with UCX's text.
  Status create_endpoint(const std::string& remote_address);
  const std::string& transports() const { return transports_; }

 protected:
  Status write_part(std::span<const lease::Piece> pieces, const lease::Grant& grant,
                    TimePoint lease_deadline) override;

 private:
  struct RemoteRegion {
    uint64_t addr;
    uint64_t length;
    ucp_rkey_h rkey;
  };
  // One part handed to the worker thread. Shared: an outstanding flush request keeps its
  // own reference, so a cancelled part never leaves UCX a dangling pointer.
  struct PartOp {
    std::span<const lease::Piece> pieces;
    Mutex mu;
    CondVar cv;
    bool done PDKV_GUARDED_BY(mu) = false;
    Status result PDKV_GUARDED_BY(mu);
  };

  Status refresh_rkeys(uint64_t epoch);
  void issue(const std::shared_ptr<PartOp>& op);  // worker thread
  static void finish(PartOp* op, Status status);  // any thread
  static void on_flush(void* request, ucs_status_t status, void* user_data);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  void force_close(const std::string& reason);  // worker thread
  void destroy_rkeys();                         // worker thread

  const std::unique_ptr<UcxWorker> worker_;  // destroyed last: it reclaims an abandoned ep_
  const bool peer_err_mode_;
  std::string transports_;
  uint64_t known_epoch_ = ~uint64_t{0};  // sender thread only
  std::atomic<bool> closing_{false};     // the destructor started

  // Worker thread only:
  ucp_ep_h ep_ = nullptr;
  // Without PEER error handling UCX cannot force-close an endpoint whose peer died (its
  // flush never ends); such an endpoint is left to ucp_worker_destroy.
  bool ep_abandoned_ = false;
  Status ep_error_;
  std::vector<RemoteRegion> remote_;
};

}  // namespace pdkv::engine::ucx
