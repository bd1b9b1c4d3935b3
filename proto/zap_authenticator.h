// ZapAuthenticator: ZeroMQ's authentication hook (ZAP, ZeroMQ RFC 27) for one context.
//
// With a cluster secret every control-plane PULL socket is a CURVE server. CURVE alone
// encrypts and proves the *server's* key; whether a client may connect is asked of the
// context's ZAP handler. This one admits a client only if it proved possession of the
// cluster's client key pair (derived from the secret, common/cluster_key.h), and refuses
// everyone else before a single message of theirs is delivered. Without a ZAP handler
// libzmq would admit any CURVE client that knows the server's public key.
//
// Threads: one, blocked in a receive on inproc://zeromq.zap.01 (woken by ZeroMQ for each
// handshake). Thread safety: start() and the destructor from the owner; the counters from
// any thread. The owner must shut its context down (zmq_ctx_shutdown) before destroying
// this object: that is what wakes the thread to leave.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "common/status.h"

namespace pdkv::proto {

class ZapAuthenticator {
 public:
  using PublicKey = std::array<uint8_t, 32>;

  // Binds the context's ZAP endpoint and starts the thread. kUnavailable if the endpoint
  // is taken (another handler in this context).
  static Result<std::unique_ptr<ZapAuthenticator>> start(zmq::context_t& context,
                                                         const PublicKey& admitted_client);
  ~ZapAuthenticator();  // joins the thread (see the header comment)
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;

  uint64_t admitted() const { return admitted_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  ZapAuthenticator(zmq::socket_t socket, const PublicKey& admitted_client);
  void run();

  zmq::socket_t socket_;  // the thread's only, once started
  const PublicKey admitted_client_;
  std::thread thread_;
  std::atomic<uint64_t> admitted_{0}, refused_{0};
};

}  // namespace pdkv::proto
