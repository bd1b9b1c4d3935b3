#include "kv/runtime/manager_runtime.h"

#include <string>
#include <utility>

#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

ChannelCallbacks ManagerRuntime::gated(ChannelCallbacks handlers) const {
  ChannelCallbacks gated;
  gated.on_message = [this, handler = std::move(handlers.on_message)](proto::Message m) {
    if (wait_until_started()) handler(std::move(m));
  };
  if (handlers.on_peer_gone) {
    gated.on_peer_gone = [this,
                          handler = std::move(handlers.on_peer_gone)](const std::string& endpoint) {
      if (wait_until_started()) handler(endpoint);
    };
  }
  if (handlers.on_peer_refused) {
    gated.on_peer_refused =
        [this, handler = std::move(handlers.on_peer_refused)](const std::string& endpoint) {
          if (wait_until_started()) handler(endpoint);
        };
  }
  return gated;
}

void ManagerRuntime::mark_started() {
  started_.store(true, std::memory_order_release);
  started_.notify_all();
}

bool ManagerRuntime::wait_until_started() const {
  started_.wait(false, std::memory_order_acquire);
  return !stopping_.load();
}

bool ManagerRuntime::begin_stop() {
  if (stopping_.exchange(true)) return false;
  mark_started();  // a handler still waiting returns
  MutexLock lock(sleep_mu_);
  sleep_wake_.notify_all();
  return true;
}

bool ManagerRuntime::sleep_for(std::chrono::milliseconds period) {
  MutexLock lock(sleep_mu_);
  sleep_wake_.wait_for(sleep_mu_, period, [this] { return stopping_.load(); });
  return !stopping_.load();
}

Status check_manager_config(const KvArgs& args, bool enable_mla_l1_5_cache,
                            const RouteDirectory* directory, std::string_view role) {
  PDKV_RETURN_IF_ERROR(args.validate().with_context(std::string(role) + " KVArgs"));
  if (enable_mla_l1_5_cache && !args.is_mla) {
    return invalid_argument("enable_mla_l1_5_cache needs an MLA model (is_mla)");
  }
  if (enable_mla_l1_5_cache && args.has_group_kv_layers()) {
    // L1.5 ownership masks name the chunked pages only; a group's pages have none.
    return invalid_argument(
        "enable_mla_l1_5_cache cannot be combined with KV layers of a state group "
        "(kv_layer_groups >= 0)");
  }
  if (directory == nullptr) {
    return invalid_argument("a " + std::string(role) + " manager needs a route directory");
  }
  return Status();
}

Result<std::unique_ptr<engine::TransferEngine>> start_rank_engine(
    engine::EngineOptions& engine_options, const KvManagerOptions& options, const KvArgs& args,
    engine::MemoryAccess access) {
  if (!options.local_ip.empty()) engine_options.host = options.local_ip;
  engine_options.require_write_grants = true;
  PDKV_ASSIGN_OR_RETURN(std::unique_ptr<engine::TransferEngine> engine,
                        engine::TransferEngine::create(engine_options));
  PDKV_RETURN_IF_ERROR(register_rank_buffers(*engine, args, access));
  return engine;
}

void stop_control_channel(std::unique_ptr<ControlChannel>& channel,
                          const std::function<void()>& fail_open_rooms,
                          const std::function<void()>& before_stop) {
  fail_open_rooms();
  if (before_stop) before_stop();
  if (channel) channel->stop();  // no handler runs after this
  fail_open_rooms();
  channel.reset();
}

}  // namespace pdkv::kv
