#include "engine/backends/ucx/ucx_peer.h"

#include <algorithm>

#include "common/logging.h"
#include "engine/backends/ucx/packed_rkey.h"
#include "engine/lease/messages.h"

namespace pdkv::engine::ucx {
namespace {

// Puts issued between two progress calls: enough to batch, few enough that the
// transport's queues drain while we issue.
constexpr int kPutsPerProgress = 64;
constexpr Millis kWaitTick{5};

}  // namespace

UcxPeer::UcxPeer(std::string endpoint, CompletionSink* sink, lease::LeasedPeerOptions options,
                 std::unique_ptr<UcxWorker> worker, bool peer_err_mode)
    : LeasedPeer(std::move(endpoint), sink, options),
      worker_(std::move(worker)),
      peer_err_mode_(peer_err_mode) {}

UcxPeer::~UcxPeer() {
  // Stopping closes the lease channel, and the receiver then drops the session's worker:
  // our endpoint failing after this point is the expected end, not news.
  closing_.store(true);
  stop();
  worker_->run_sync([this] {
    destroy_rkeys();
    if (ep_ == nullptr || ep_abandoned_) return;
    // A healthy endpoint is flushed and closed politely (bounded); a failed one, or one
    // whose flush does not finish, is released without the peer.
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = (ep_error_.ok() || !peer_err_mode_) ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &param);
    auto deadline = now() + Millis(2000);
    while (UCS_PTR_IS_PTR(req) && ucp_request_check_status(req) == UCS_INPROGRESS &&
           now() < deadline) {
      ucp_worker_progress(worker_->worker());
    }
    if (UCS_PTR_IS_PTR(req)) {
      if (ucp_request_check_status(req) == UCS_INPROGRESS) {
        PDKV_LOG_WARN("ucx: closing the endpoint to {} did not finish in 2 s", endpoint());
      }
      ucp_request_free(req);
    }
    ep_ = nullptr;
  });
}

void UcxPeer::on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* self = static_cast<UcxPeer*>(arg);
  self->ep_error_ =
      unavailable("ucx endpoint to " + self->endpoint() + " failed: " + ucs_status_string(status));
  if (self->closing_.load()) {
    PDKV_LOG_DEBUG("{} (while closing the session)", self->ep_error_.message());
  } else {
    PDKV_LOG_WARN("{}", self->ep_error_.message());
  }
}

Status UcxPeer::create_endpoint(const std::string& remote_address) {
  Status result;
  worker_->run_sync([&] {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(remote_address.data());
    params.err_mode = peer_err_mode_ ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    params.err_handler.cb = &UcxPeer::on_ep_error;
    params.err_handler.arg = this;
    ucs_status_t st = ucp_ep_create(worker_->worker(), &params, &ep_);
    if (st != UCS_OK) {
      ep_ = nullptr;
      result = unavailable("ucx: no endpoint to " + endpoint() + ": " + ucs_status_string(st) +
                           " (transports '" + worker_->requested_tls() + "')");
      return;
    }
    transports_ = endpoint_transports(ep_);
  });
  if (!result.ok()) return result;
  PDKV_LOG_INFO("ucx: endpoint to {} uses {}", endpoint(), transports_);
  bool only_tcp =
      transports_.find("tcp") != std::string::npos && transports_.find(',') == std::string::npos;
  if (only_tcp && asks_beyond_tcp(worker_->requested_tls())) {
    PDKV_LOG_WARN("ucx: endpoint to {} fell back to tcp although '{}' was asked for", endpoint(),
                  worker_->requested_tls());
  }
  return Status();
}

void UcxPeer::destroy_rkeys() {
  for (auto& r : remote_) ucp_rkey_destroy(r.rkey);
  remote_.clear();
}

Status UcxPeer::refresh_rkeys(uint64_t epoch) {
  PDKV_ASSIGN_OR_RETURN(lease::RegionTable table,
                        client().regions(now() + Millis(options().io_timeout_ms)));
  Status result;
  worker_->run_sync([&] {
    destroy_rkeys();
    if (ep_ == nullptr || !ep_error_.ok()) {
      result = ep_error_.ok() ? unavailable("ucx endpoint closed") : ep_error_;
      return;
    }
    for (const auto& p : table.regions) {
      // UCX parses the rkey without a length: bound it first (packed_rkey.h).
      Status bounded = check_packed_rkey(p.rkey);
      if (!bounded.ok()) {
        result = data_loss("ucx: region " + std::to_string(p.addr) + " of " + endpoint() + ": " +
                           bounded.message());
        return;
      }
      const std::string padded = padded_rkey(p.rkey);
      ucp_rkey_h rkey = nullptr;
      ucs_status_t st = ucp_ep_rkey_unpack(ep_, padded.data(), &rkey);
      if (st != UCS_OK) {
        result = internal_error("ucp_ep_rkey_unpack for region " + std::to_string(p.addr) + " of " +
                                endpoint() + ": " + ucs_status_string(st));
        return;
      }
      remote_.push_back(RemoteRegion{p.addr, p.length, rkey});
    }
    std::sort(remote_.begin(), remote_.end(),
              [](const auto& a, const auto& b) { return a.addr < b.addr; });
  });
  if (result.ok()) known_epoch_ = std::max(epoch, table.epoch);
  return result;
}

void UcxPeer::finish(PartOp* op, Status status) {
  MutexLock lock(op->mu);
  if (op->done) return;
  op->result = std::move(status);
  op->done = true;
  op->cv.notify_all();
}

void UcxPeer::on_flush(void* request, ucs_status_t status, void* user_data) {
  auto* ref = static_cast<std::shared_ptr<PartOp>*>(user_data);
  finish(ref->get(), status == UCS_OK ? Status()
                                      : unavailable(std::string("ucx flush failed: ") +
                                                    ucs_status_string(status)));
  delete ref;
  ucp_request_free(request);
}

void UcxPeer::issue(const std::shared_ptr<PartOp>& shared) {
  PartOp* op = shared.get();
  if (ep_ == nullptr || !ep_error_.ok()) {
    finish(op, ep_error_.ok() ? unavailable("ucx endpoint closed") : ep_error_);
    return;
  }
  ucp_request_param_t put_param{};
  int since_progress = 0;
  for (const auto& piece : op->pieces) {
    uint64_t done = 0;
    while (done < piece.length) {
      uint64_t dst = piece.dst_addr + done;
      // The receiver validated the range; adjacent regions may split it across rkeys.
      auto it = std::upper_bound(remote_.begin(), remote_.end(), dst,
                                 [](uint64_t a, const RemoteRegion& r) { return a < r.addr; });
      if (it == remote_.begin() || dst >= std::prev(it)->addr + std::prev(it)->length) {
        finish(op, internal_error("ucx: no rkey covers dst " + std::to_string(dst) + " (block " +
                                  std::to_string(piece.index) + ")"));
        return;
      }
      const RemoteRegion& r = *std::prev(it);
      uint64_t len = std::min(piece.length - done, r.addr + r.length - dst);
      ucs_status_ptr_t req = ucp_put_nbx(ep_, reinterpret_cast<const void*>(piece.src_addr + done),
                                         len, dst, r.rkey, &put_param);
      if (UCS_PTR_IS_ERR(req)) {
        finish(op, unavailable("ucp_put_nbx (block " + std::to_string(piece.index) +
                               "): " + ucs_status_string(UCS_PTR_STATUS(req))));
        return;
      }
      if (req != nullptr) ucp_request_free(req);  // completion is observed through the flush
      done += len;
      if (++since_progress == kPutsPerProgress) {
        since_progress = 0;
        ucp_worker_progress(worker_->worker());
        if (!ep_error_.ok()) {
          finish(op, ep_error_);
          return;
        }
      }
    }
  }
  ucp_request_param_t flush_param{};
  flush_param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  flush_param.cb.send = &UcxPeer::on_flush;
  auto* ref = new std::shared_ptr<PartOp>(shared);  // owned by on_flush
  flush_param.user_data = ref;
  ucs_status_ptr_t req = ucp_ep_flush_nbx(ep_, &flush_param);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) {
    delete ref;  // completed immediately: the callback will not run
    finish(op, req == nullptr ? Status()
                              : unavailable(std::string("ucp_ep_flush_nbx: ") +
                                            ucs_status_string(UCS_PTR_STATUS(req))));
  }
}

void UcxPeer::force_close(const std::string& reason) {
  if (ep_ == nullptr || ep_abandoned_) return;
  if (ep_error_.ok()) ep_error_ = unavailable(reason);
  destroy_rkeys();
  if (!peer_err_mode_) {
    // UCX refuses FORCE without PEER error handling, and a flush to a dead peer never
    // ends: the endpoint stays as it is, unused, until our worker is destroyed with us.
    ep_abandoned_ = true;
    return;
  }
  // FORCE completes every outstanding request (our flush) with CANCELED at once.
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &param);
  for (int i = 0;
       i < 1000 && UCS_PTR_IS_PTR(req) && ucp_request_check_status(req) == UCS_INPROGRESS; ++i) {
    ucp_worker_progress(worker_->worker());
  }
  if (UCS_PTR_IS_PTR(req)) ucp_request_free(req);
  ep_ = nullptr;
}

Status UcxPeer::write_part(std::span<const lease::Piece> pieces, const lease::Grant& grant,
                           TimePoint lease_deadline) {
  if (grant.regions_epoch != known_epoch_) PDKV_RETURN_IF_ERROR(refresh_rkeys(grant.regions_epoch));
  auto shared = std::make_shared<PartOp>();
  PartOp& op = *shared;
  op.pieces = pieces;
  worker_->add_busy(+1);
  worker_->run([this, shared] { issue(shared); });
  std::string cancel;
  for (;;) {
    {
      MutexLock lock(op.mu);
      if (op.cv.wait_for(op.mu, kWaitTick, [&]() PDKV_REQUIRES(op.mu) { return op.done; })) break;
    }
    if (!cancel.empty()) continue;  // cancellation requested; the flush completes soon
    if (client().peer_closed()) {
      cancel = "ucx: receiver " + endpoint() + " closed its control connection mid-part";
    } else if (now() >= lease_deadline) {
      cancel = "ucx: part to " + endpoint() + " not flushed before its lease expired";
    }
    if (!cancel.empty()) {
      worker_->run([this, cancel, shared] {
        force_close(cancel);
        finish(shared.get(), unavailable(cancel));
      });
    }
  }
  worker_->add_busy(-1);
  MutexLock lock(op.mu);
  if (!cancel.empty() && op.result.ok()) return unavailable(cancel);
  return op.result;
}

}  // namespace pdkv::engine::ucx
