// LeaseServer: the receiving side of the shm and UCX backends' control channel.
//
// Why leases: with CMA (and with UCX puts) the *sender* writes into this process's
// memory, so the receiver cannot check each byte as the TCP backend does. Instead the
// sender asks for a lease on every part before writing it: the part's destination ranges
// travel here, are admitted by the MemoryRegistry (MemoryRegistry::admit: registered
// memory, and the write grant each range names), which pins them, and only then is the
// lease granted. The pin is held until the sender reports the part done (kDone), the
// connection drops (a dead process writes nothing more: the kernel closes its sockets only
// after all its threads have left their system calls) or the lease runs out. So:
//  * a part with one bad entry is refused before any byte of it is written (OutOfRange
//    naming the entry, as the TCP receiver does);
//  * MemoryRegistry::remove() (unregister_memory) waits for every granted lease that may
//    still touch the region and later leases are refused: revocation is immediate for new
//    parts and bounded by `lease_ms` for parts in flight.
// Membership: with a cluster secret (LeaseServerOptions::cluster_key) a connection
// starts with the session handshake (lease_auth.h) and nothing else is read from it, nor
// anything sent to it (pid, CMA probe address, UCX worker address, rkeys), until the
// sender proved the secret; a sender that cannot is refused (kAuthRefused, naming the
// mismatch) and closed before any lease. Without a secret, a sender that authenticates
// is refused the same way (the mismatch is a configuration error, said at once).
// The sender keeps its own deadline, started before it sent the request and therefore no
// later than ours, and starts no write syscall after it; each syscall is bounded in size.
// A lease is a promise of a cooperating pdkv peer, not a sandbox: CMA needs ptrace rights
// over this process, and such a peer could write anywhere anyway. The check protects
// against wrong addresses (bugs, stale page tables), which is what the contract is about.
//
// Threads: owns one acceptor thread and one thread per accepted connection, at most
// max_connections of them (more are closed at accept, as is one whose thread cannot be
// started; both logged, rate-limited). Connection threads block only on their own socket
// (each handshake step, the first frame included, bounded by handshake_timeout_ms, so a
// silent stranger leaves soon and frees its slot; bounded by lease_ms while a lease is
// held; an authenticated sender's idle connection stays, as its session does).
// Thread safety: listen() once, then nothing; the destructor stops and joins every thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster_key.h"
#include "common/mutex.h"
#include "common/status.h"
#include "engine/lease/wire.h"
#include "engine/memory_registry.h"

namespace pdkv::engine {
class MemoryRegistry;
}

namespace pdkv::engine::lease {

// What a backend keeps for one authenticated sender, from its hello until its connection
// closes (UCX: the worker this sender's writes land in, so that a sender killed halfway
// through a shared-memory message can wedge nothing but its own session).
class LeaseSession {
 public:
  virtual ~LeaseSession() = default;
  // Extra bytes for kHelloAck (shm: CMA probe address; UCX: the session worker's address).
  virtual std::string hello_extra() = 0;
  // A lease was granted (+1) or released (-1): UCX drives its worker hard while writes
  // may arrive and sleeps otherwise.
  virtual void lease_activity(int /*delta*/) {}
};

// A session with nothing but fixed hello bytes (shm, tests).
class FixedLeaseSession final : public LeaseSession {
 public:
  explicit FixedLeaseSession(std::string extra) : extra_(std::move(extra)) {}
  std::string hello_extra() override { return extra_; }

 private:
  const std::string extra_;
};

// Backend-specific parts of the handshake; implemented by the backend, called from
// connection threads (so must be thread-safe).
class LeaseServerHooks {
 public:
  // Called once per sender that passed authentication, before its hello ack.
  virtual Result<std::unique_ptr<LeaseSession>> open_session() = 0;
  // Appends a kRegions payload; only UCX answers (others return FailedPrecondition).
  virtual Status regions_payload(std::vector<uint8_t>* out) = 0;
  // Changes whenever the region set (and thus the rkey table) changes.
  virtual uint64_t regions_epoch() = 0;
  // The index of the first range this backend cannot write (shm: device memory, which an
  // automatic engine registers for its tcp path), or ranges.size() when it can write all;
  // *why says why. Checked before admission, so such a part is refused whole.
  virtual size_t unwritable(std::span<const DstRange> ranges, std::string* why) {
    (void)why;
    return ranges.size();
  }

 protected:
  ~LeaseServerHooks() = default;
};

struct LeaseServerOptions {
  std::string backend_name;         // the sender must say the same in kHello
  int lease_ms = 5000;              // a granted lease is held at most this long (plus slack)
  int handshake_timeout_ms = 3000;  // per handshake step, the first frame included
  // Set: only senders that prove the cluster secret are served (lease_auth.h).
  std::shared_ptr<const ClusterKey> cluster_key;
  // Most connections served at once (a thread each); more are closed at accept. The
  // backends pass PDKV_TCP_MAX_CONNECTIONS (EngineOptions::tcp.max_connections).
  int max_connections = 512;
};

class LeaseServer {
 public:
  // `registry` and `hooks` are borrowed and must outlive the server.
  LeaseServer(LeaseServerOptions options, MemoryRegistry* registry, LeaseServerHooks* hooks);
  ~LeaseServer();
  LeaseServer(const LeaseServer&) = delete;
  LeaseServer& operator=(const LeaseServer&) = delete;

  // Binds host:port and starts the acceptor; returns "host:port".
  Result<std::string> listen(const std::string& host, int port);

 private:
  struct Conn {
    Socket sock;
    std::thread thread;
    std::atomic<bool> finished{false};
    // The peer's IP address, and whether its handshake succeeded: until then it counts
    // against the limits on unproven connections (engine/connection_slots.h).
    std::string address;
    std::atomic<bool> proven{false};
  };
  void accept_loop();
  void serve(Conn* conn);
  Status handshake(Socket& sock, std::unique_ptr<LeaseSession>* session);
  Status handle_lease(Socket& sock, std::span<const uint8_t> payload, LeaseSession& session);
  Status send_regions(Socket& sock);
  void reap_finished_locked() PDKV_REQUIRES(conns_mu_);
  // Why a new connection from `address` must be refused, or "" if it may be served.
  std::string over_limit(const std::string& address) const PDKV_REQUIRES(conns_mu_);

  const LeaseServerOptions options_;
  MemoryRegistry* const registry_;
  LeaseServerHooks* const hooks_;
  Socket listener_;
  std::string host_identity_;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  Mutex conns_mu_;
  std::vector<std::unique_ptr<Conn>> conns_ PDKV_GUARDED_BY(conns_mu_);
};

}  // namespace pdkv::engine::lease
