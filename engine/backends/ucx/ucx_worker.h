// UcxWorker: one UCP worker on a shared UcxContext, driven by one thread that makes every
// call on it. The worker runs in UCS_THREAD_MODE_SINGLE (no locks inside it, nothing for
// TSan to see racing there); other threads hand work over with run() / run_sync().
// A backend runs one worker per sending peer and one per receiving session: UCX's
// shared-memory transports deliver through a ring every sender of a worker writes into,
// and a sender killed between claiming a slot and filling it wedges that ring for good.
// With a worker each, the wedge stays with the dead peer's worker and goes with it.
//
// Progress policy: the thread spins on ucp_worker_progress() while anything may be moving
// (busy() > 0: parts in flight on the sender, leases granted on the receiver - the tcp
// and posix transports apply puts in the target's progress), and otherwise sleeps in
// poll() on the worker's event fd (UCP_FEATURE_WAKEUP, when the transports offer it) and
// its own eventfd, at most kIdleTickMs, so keepalive and connection events still run.
//
// Threads: owns the "ucx worker" thread; it blocks only in that bounded poll().
// Thread safety: run/run_sync/add_busy from any thread; ctx()/worker() only on the worker
// thread (i.e. inside a function given to run()).
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/backends/ucx/ucx_context.h"

namespace pdkv::engine::ucx {

class UcxWorker {
 public:
  static Result<std::unique_ptr<UcxWorker>> create(std::shared_ptr<UcxContext> context);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // Queues fn to run on the worker thread.
  void run(std::function<void()> fn);
  // Runs fn on the worker thread and waits for it (never call from the worker thread).
  void run_sync(const std::function<void()>& fn);
  // Spin (delta > 0) or allow sleeping again (delta < 0).
  void add_busy(int delta);
  bool on_worker_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

  ucp_context_h ctx() const { return context_->get(); }
  ucp_worker_h worker() const { return worker_; }
  // The packed worker address peers create their endpoints from (immutable).
  const std::string& address() const { return address_; }
  // The transports asked for ("" = UCX default), as logged and compared by backends.
  const std::string& requested_tls() const { return context_->requested_tls(); }

 private:
  UcxWorker() = default;
  void loop();
  void wake();

  std::shared_ptr<UcxContext> context_;
  ucp_worker_h worker_ = nullptr;
  int ucx_efd_ = -1;  // from ucp_worker_get_efd, or -1 without wakeup support
  int wake_fd_ = -1;  // our eventfd
  std::string address_;
  std::atomic<int> busy_{0};
  std::atomic<bool> stopping_{false};
  Mutex queue_mu_;
  std::deque<std::function<void()>> queue_ PDKV_GUARDED_BY(queue_mu_);
  std::thread thread_;
};

// "tcp/lo, posix/memory": the transports an endpoint's lanes use, from ucp_ep_print_info
// (UCX 1.13 has no ucp_ep_query for transports). Call on the worker thread.
std::string endpoint_transports(ucp_ep_h ep);

// True if `tls` asks for something faster than tcp (shared memory, RDMA, GPU IPC).
bool asks_beyond_tcp(const std::string& tls);

// True if `tls` names a transport that does puts in hardware or the kernel (RDMA, GPU
// IPC, xpmem, knem). Otherwise (tcp, posix, sysv, self) UCX emulates a put with active
// messages the receiver answers, and UCX 1.13 aborts a receiver that answers a sender
// which died mid-transfer (RELIABILITY.md, "UCX over tcp or shared memory").
bool rma_in_hardware(const std::string& tls);

}  // namespace pdkv::engine::ucx
