#include "engine/backends/ucx/ucx_backend.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <optional>

#include "common/config.h"
#include "common/logging.h"
#include "engine/backends/ucx/ucx_peer.h"
#include "engine/backends/ucx/ucx_settings.h"
#include "engine/backends/ucx/ucx_worker.h"
#include "engine/device/device_regions.h"
#include "engine/lease/lease_client.h"
#include "engine/lease/lease_server.h"
#include "engine/lease/messages.h"
#include "engine/lease/wire.h"

namespace pdkv::engine::ucx {

Result<UcxOptions> UcxOptions::from(const config::Settings& settings) {
  UcxOptions o;
  PDKV_ASSIGN_OR_RETURN(o.tls, config::read<kUcxTls>(settings));
  PDKV_ASSIGN_OR_RETURN(o.err_mode, config::read<kUcxErrMode>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t timeout, config::read<kUcxIoTimeoutMs>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t part, config::read<kUcxPartBytes>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t workers, config::read<kUcxMaxWorkers>(settings));
  o.io_timeout_ms = static_cast<int>(timeout);
  o.part_bytes = static_cast<uint64_t>(part);
  o.max_workers = static_cast<int>(workers);
  return o;
}

namespace {

// "auto": PEER error handling only when every allowed transport supports it (tcp, self);
// asking for PEER with posix/sysv/cma makes UCX drop them without a word.
bool use_peer_err_mode(const UcxOptions& o, const std::string& effective_tls) {
  if (o.err_mode != "auto") return o.err_mode == "peer";
  if (effective_tls.empty()) return false;
  std::string rest = effective_tls;
  for (const char* ok : {"tcp", "self", ","}) {
    for (auto pos = rest.find(ok); pos != std::string::npos; pos = rest.find(ok)) {
      rest.erase(pos, std::string(ok).size());
    }
  }
  return rest.empty();
}

class UcxBackend final : public Backend, private lease::LeaseServerHooks {
 public:
  UcxBackend(const BackendContext& ctx, const UcxOptions& options,
             std::shared_ptr<UcxContext> context, bool peer_err_mode)
      : ctx_(ctx),
        options_(options),
        context_(std::move(context)),
        peer_err_mode_(peer_err_mode),
        server_(
            std::in_place,
            lease::LeaseServerOptions{"ucx", options.io_timeout_ms, ctx.options->connect_timeout_ms,
                                      ctx.options->cluster_key, ctx.options->tcp.max_connections},
            ctx.registry, static_cast<lease::LeaseServerHooks*>(this)) {}

  ~UcxBackend() override {
    server_.reset();  // its threads call our hooks and own the session workers
    MutexLock lock(regions_mu_);
    for (auto& [addr, r] : regions_) ucp_mem_unmap(context_->get(), r.memh);
    regions_.clear();
  }

  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.name = "ucx";
    c.cross_host = true;
    c.software_bounds_check = true;
    c.authenticates_sessions = true;  // the lease channel's handshake (lease_auth.h)
    c.wants_memory_hooks = true;
    // Device memory only where UCX itself moves it (built with CUDA); no staging here.
    const DeviceSupport device =
        context_->cuda_memory() ? DeviceSupport::kNative : DeviceSupport::kNone;
    c.device_source = device;
    c.device_destination = device;
    return c;
  }

  Result<std::string> listen() override {
    return server_->listen(ctx_.options->host, ctx_.options->port);
  }

  Status on_register_memory(uint64_t addr, uint64_t length) override {
    // Context operations: safe from any thread (UcxContext is mt_workers_shared).
    Region r{length, nullptr, {}};
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address = reinterpret_cast<void*>(addr);
    p.length = length;
    const bool device =
        ctx_.device_regions != nullptr && ctx_.device_regions->device_of(addr, length) >= 0;
    if (device) {
      p.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
      p.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    ucs_status_t st = ucp_mem_map(context_->get(), &p, &r.memh);
    if (st != UCS_OK) return unavailable(std::string("ucp_mem_map: ") + ucs_status_string(st));
    if (device) {
      // Trust what UCX made of it, not the request.
      ucp_mem_attr_t attr{};
      attr.field_mask = UCP_MEM_ATTR_FIELD_MEM_TYPE;
      st = ucp_mem_query(r.memh, &attr);
      if (st != UCS_OK || attr.mem_type != UCS_MEMORY_TYPE_CUDA) {
        ucp_mem_unmap(context_->get(), r.memh);
        return failed_precondition(
            "ucx: registered CUDA device memory, but UCX reports it as another memory type "
            "(UCX is likely not built with CUDA); use the tcp backend");
      }
    }
    void* packed = nullptr;
    size_t size = 0;
    st = ucp_rkey_pack(context_->get(), r.memh, &packed, &size);
    if (st != UCS_OK) {
      ucp_mem_unmap(context_->get(), r.memh);
      return internal_error(std::string("ucp_rkey_pack: ") + ucs_status_string(st));
    }
    r.rkey.assign(static_cast<const char*>(packed), size);
    ucp_rkey_buffer_release(packed);
    MutexLock lock(regions_mu_);
    regions_[addr] = std::move(r);
    epoch_.fetch_add(1);
    return Status();
  }

  Status on_unregister_memory(uint64_t addr, uint64_t) override {
    Region r;
    {
      MutexLock lock(regions_mu_);
      auto it = regions_.find(addr);
      if (it == regions_.end())
        return not_found("ucx: no mapped region at " + std::to_string(addr));
      r = std::move(it->second);
      regions_.erase(it);
      epoch_.fetch_add(1);
    }
    ucp_mem_unmap(context_->get(), r.memh);
    return Status();
  }

  Result<std::unique_ptr<BackendPeer>> connect(const std::string& endpoint) override {
    auto client = std::make_unique<lease::LeaseClient>();
    PDKV_RETURN_IF_ERROR(client->connect(endpoint, "ucx", ctx_.options->connect_timeout_ms,
                                         ctx_.options->cluster_key.get()));
    // UCX wire-up happens only here, after the lease handshake: the worker address comes
    // in its hello ack (sent by the receiver only once we proved the cluster secret, and
    // accepted by us only once it proved it), and the endpoint is created from it below.
    // rkeys follow later over the same authenticated channel (kRegions).
    std::string address = client->hello().extra;
    PDKV_ASSIGN_OR_RETURN(auto worker, UcxWorker::create(context_));
    auto peer = std::make_unique<UcxPeer>(
        endpoint, ctx_.sink,
        lease::LeasedPeerOptions{options_.part_bytes, 1u << 16, options_.io_timeout_ms},
        std::move(worker), peer_err_mode_);
    PDKV_RETURN_IF_ERROR(peer->create_endpoint(address));
    peer->start(std::move(client));
    return std::unique_ptr<BackendPeer>(std::move(peer));
  }

  Status post(BackendPeer& peer, std::span<const WriteBlock> blocks, uint64_t token) override {
    return static_cast<UcxPeer&>(peer).post(blocks, token);
  }

 private:
  struct Region {
    uint64_t length = 0;
    ucp_mem_h memh = nullptr;
    std::string rkey;  // packed
  };

  // One receiving worker per sender (ucx_worker.h): its writes land through this worker
  // only, so a sender killed mid-message cannot wedge the others' deliveries.
  class ReceiveSession final : public lease::LeaseSession {
   public:
    explicit ReceiveSession(std::unique_ptr<UcxWorker> worker) : worker_(std::move(worker)) {}
    std::string hello_extra() override { return worker_->address(); }
    void lease_activity(int delta) override { worker_->add_busy(delta); }

   private:
    const std::unique_ptr<UcxWorker> worker_;
  };

  Result<std::unique_ptr<lease::LeaseSession>> open_session() override {
    PDKV_ASSIGN_OR_RETURN(auto worker, UcxWorker::create(context_));
    return std::unique_ptr<lease::LeaseSession>(
        std::make_unique<ReceiveSession>(std::move(worker)));
  }

  Status regions_payload(std::vector<uint8_t>* out) override {
    MutexLock lock(regions_mu_);
    lease::RegionTable table;
    table.epoch = epoch_.load();
    table.regions.reserve(regions_.size());
    for (const auto& [addr, r] : regions_) table.regions.push_back({addr, r.length, r.rkey});
    lease::encode_regions(table, out);
    return Status();
  }

  uint64_t regions_epoch() override { return epoch_.load(); }

  const BackendContext ctx_;
  const UcxOptions options_;
  const std::shared_ptr<UcxContext> context_;
  const bool peer_err_mode_;
  Mutex regions_mu_;
  std::map<uint64_t, Region> regions_ PDKV_GUARDED_BY(regions_mu_);
  std::atomic<uint64_t> epoch_{1};
  std::optional<lease::LeaseServer> server_;  // emplaced in the constructor; reset first
};

}  // namespace

Result<std::unique_ptr<Backend>> make_ucx_backend(const BackendContext& ctx,
                                                  const UcxOptions& options) {
  std::string tls = options.tls;
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    if (env != nullptr) tls = env;
  }
  PDKV_ASSIGN_OR_RETURN(auto context, UcxContext::create(tls, options.max_workers));
  // A worker now, so that transports that cannot run fail here, not at the first session.
  PDKV_ASSIGN_OR_RETURN(auto probe, UcxWorker::create(context));
  probe.reset();
  if (!tls.empty() && !rma_in_hardware(tls)) {
    PDKV_LOG_WARN(
        "ucx: transports '{}' do no puts in hardware: UCX emulates them in software, and UCX "
        "1.13 can abort a receiving process whose sender dies mid-transfer; for host memory "
        "the tcp and shm backends do not have this weakness (RELIABILITY.md)",
        tls);
  }
  bool peer_mode = use_peer_err_mode(options, tls);
  PDKV_LOG_INFO("ucx: transports '{}', error handling {}", tls.empty() ? "(UCX default)" : tls,
                peer_mode ? "PEER" : "NONE (failures detected on the control channel)");
  return std::unique_ptr<Backend>(
      std::make_unique<UcxBackend>(ctx, options, std::move(context), peer_mode));
}

Result<std::unique_ptr<Backend>> make_ucx_backend(const BackendContext& ctx) {
  PDKV_ASSIGN_OR_RETURN(auto options, UcxOptions::from(ctx.options->settings));
  return make_ucx_backend(ctx, options);
}

}  // namespace pdkv::engine::ucx
