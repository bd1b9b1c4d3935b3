// ManagerRuntime: what a prefill and a decode manager both do at start and stop.
//
// Both start the same way: check their config (check_manager_config), create the rank's
// transfer engine with its buffers registered (start_rank_engine), open the control
// channel with handlers that wait until the rank's identity is known (gated()), then
// mark the manager started. Both stop the same way: begin_stop() (handlers still waiting
// return, sleeping threads wake), their own threads joined, rooms still open failed
// while the channel can still tell their peers, the channel stopped, rooms a handler
// opened meanwhile failed unannounced (stop_control_channel), the engine released.
//
// Thread safety: every method of ManagerRuntime may be called from any thread. Its
// handlers' gate and its stop signal are atomics (sequentially consistent, so a caller
// that counts itself before reading stopping() is seen by the stopping thread, or sees
// it); sleep_for() waits on its own mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/transfer_engine.h"
#include "kv/control/control_channel.h"
#include "kv/kv_args.h"
#include "kv/manager_options.h"
#include "kv/metrics/metrics_registry.h"
#include "kv/route/route_directory.h"

namespace pdkv::kv {

class ManagerRuntime {
 public:
  ManagerRuntime() = default;
  ManagerRuntime(const ManagerRuntime&) = delete;
  ManagerRuntime& operator=(const ManagerRuntime&) = delete;

  // `handlers`, each run only once the manager started (wait_until_started()): the
  // channel's receive thread starts before the rank's identity (which needs the channel's
  // endpoint) is set. Empty handlers stay empty.
  ChannelCallbacks gated(ChannelCallbacks handlers) const;
  // start(): the identity is set; gated handlers run from now on.
  void mark_started();
  // A gated handler's first step: waits for mark_started() or begin_stop(); true if the
  // manager runs (not stopping).
  bool wait_until_started() const;

  // shutdown()'s first step: true for the first caller only. Gated handlers still waiting
  // return without running; threads in sleep_for() wake.
  bool begin_stop();
  bool stopping() const { return stopping_.load(); }
  // A manager thread's pause between rounds (timer, refresher): up to `period`, or until
  // begin_stop(). False once the manager is stopping.
  bool sleep_for(std::chrono::milliseconds period);

 private:
  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  Mutex sleep_mu_;
  CondVar sleep_wake_;
};

// create()'s checks, the same on both sides: the KVArgs are valid, the MLA L1.5 cache is
// asked only of an MLA model, and there is a route directory. `role`: "prefill" or
// "decode", as the errors name it.
Status check_manager_config(const KvArgs& args, bool enable_mla_l1_5_cache,
                            const RouteDirectory* directory, std::string_view role);

// create(), the same on both sides: `config` checked (check_manager_config), the manager
// constructed and started; a start that failed is shut down (what it began is stopped and
// joined) and its error returned; a started manager's metrics join the process's
// (MetricsRegistry::process()). A manager befriends ManagerCreation for its private
// constructor, start() and shutdown(); metrics_registration_ is its RankManager's.
class ManagerCreation {
 public:
  template <typename Manager, typename Config>
  static Result<std::unique_ptr<Manager>> create(Config config,
                                                 const ControlChannelFactory& channels,
                                                 std::shared_ptr<RouteDirectory> directory,
                                                 std::string_view role) {
    PDKV_RETURN_IF_ERROR(
        check_manager_config(config.args, config.enable_mla_l1_5_cache, directory.get(), role));
    std::unique_ptr<Manager> m(new Manager(std::move(config), std::move(directory)));
    Status started = m->start(channels);
    if (!started.ok()) {
      m->shutdown();
      return started;
    }
    m->metrics_registration_ = MetricsRegistry::process().add(
        [raw = m.get()](PrometheusText& out) { raw->render_metrics(out); });
    return m;
  }
};

// The rank's transfer engine: on `options.local_ip` when set (written into
// `engine_options.host`, which the control channel then binds too), admitting a peer's
// write only under a write grant, with every buffer of `args` registered with `access`
// (kPeerWritable on a decode, kLocalReadOnly on a prefill).
Result<std::unique_ptr<engine::TransferEngine>> start_rank_engine(
    engine::EngineOptions& engine_options, const KvManagerOptions& options, const KvArgs& args,
    engine::MemoryAccess access);

// Shutdown's control-plane steps: `fail_open_rooms` while the channel can still tell the
// rooms' peers (a shutdown right after an abort must not leave them to find out by
// heartbeat), then `before_stop` (if set), the channel stopped (no handler runs after),
// `fail_open_rooms` again for a room a handler opened meanwhile (unannounced now), and
// the channel released. A null channel (start() failed before it) skips its steps.
void stop_control_channel(std::unique_ptr<ControlChannel>& channel,
                          const std::function<void()>& fail_open_rooms,
                          const std::function<void()>& before_stop = {});

}  // namespace pdkv::kv
