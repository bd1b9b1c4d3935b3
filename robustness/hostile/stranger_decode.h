// A stranger posing as a decode rank on the control plane: its own ZeroMQ endpoint (to
// hear what victims answer), its own transfer engine and KV-shaped buffers (so a
// registration it sends is one a prefill would accept if nothing else stopped it), and
// bookkeeping of what came back: registration answers, room statuses, and whether any
// victim wrote a byte into its buffers.
//
// Thread safety: every method may be called from any thread (answers arrive on the
// endpoint's receive thread).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "robustness/hostile/attack_options.h"
#include "common/mutex.h"
#include "common/status.h"
#include "engine/transfer_engine.h"
#include "proto/messages.h"
#include "proto/zmq_endpoint.h"

namespace pdkv::hostile {

class StrangerDecode {
 public:
  // Binds its control socket and engine on loopback; the buffers are zeroed.
  static Result<std::unique_ptr<StrangerDecode>> start(const AttackOptions& options);
  ~StrangerDecode();

  // Who it says it is: its own endpoints under a fresh random incarnation, unless
  // `as_endpoint` names another rank's control endpoint to impersonate (and its engine
  // endpoint is AttackOptions::as_engine when that is set).
  proto::RankIdentity identity(const std::string& as_endpoint = "") const;
  // A registration of its buffers, shaped like a real decode's, under `who`.
  proto::BufferRegistration registration(const proto::RankIdentity& who) const;

  // Queues `messages` to `to`, waiting while the queue is full; gives up after
  // `stall` without progress, or once a victim refused our handshake. Returns how many
  // were queued.
  size_t send_all(const std::string& to, std::span<const proto::Message> messages,
                  std::chrono::milliseconds stall = std::chrono::milliseconds(2000));

  // Waits for the answer to a registration of `incarnation`; nullopt after `timeout`, or
  // at once when a victim refused our handshake.
  std::optional<proto::RegistrationResult> wait_registration(uint64_t incarnation,
                                                             std::chrono::milliseconds timeout);
  // Opens every byte of its buffers to writes naming `grant` (its engine would admit a
  // victim's push of the room).
  Status grant_everything(uint64_t grant);

  // The first 64 statuses received, and how many arrived in all.
  std::vector<proto::TransferStatus> statuses() const;
  size_t status_count() const;
  size_t messages_received() const;
  // Bytes of its buffers some victim changed (they start zeroed).
  uint64_t bytes_received() const;
  // Waits until the endpoint reports a handshake a victim refused (a cluster secret
  // there), at most `timeout`; the count.
  uint64_t wait_handshake_refused(std::chrono::milliseconds timeout) const;

  proto::ZmqEndpoint& endpoint() { return *endpoint_; }
  const std::vector<std::vector<uint8_t>>& buffers() const { return buffers_; }

 private:
  explicit StrangerDecode(const AttackOptions& options);
  Status on_message(proto::Message&& message);

  const AttackOptions options_;
  std::vector<std::vector<uint8_t>> buffers_;
  std::unique_ptr<engine::TransferEngine> engine_;
  std::unique_ptr<proto::ZmqEndpoint> endpoint_;
  const uint64_t incarnation_;

  mutable Mutex mu_;
  std::vector<proto::RegistrationResult> results_ PDKV_GUARDED_BY(mu_);
  std::vector<proto::TransferStatus> statuses_ PDKV_GUARDED_BY(mu_);
  size_t received_ PDKV_GUARDED_BY(mu_) = 0;
  size_t status_count_ PDKV_GUARDED_BY(mu_) = 0;
};

}  // namespace pdkv::hostile
