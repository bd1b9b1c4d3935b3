#include "engine/backends/cuda_ipc/cuda_ipc_backend.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/logging.h"
#include "engine/backends/cuda_ipc/export_table.h"
#include "engine/backends/cuda_ipc/fd_channel.h"
#include "engine/backends/cuda_ipc/handle_wire.h"
#include "engine/backends/cuda_ipc/ipc_writer.h"
#include "engine/device/cuda_ipc_driver.h"
#include "engine/device/device_regions.h"
#include "engine/lease/lease_server.h"
#include "engine/lease/wire.h"

namespace pdkv::engine::cuda_ipc {

Result<CudaIpcOptions> CudaIpcOptions::from(const config::Settings& settings) {
  CudaIpcOptions o;
  PDKV_ASSIGN_OR_RETURN(int64_t timeout, config::read<kCudaIpcIoTimeoutMs>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t part, config::read<kCudaIpcPartBytes>(settings));
  o.io_timeout_ms = static_cast<int>(timeout);
  o.part_bytes = static_cast<uint64_t>(part);
  return o;
}

PathVerdict can_serve(MemoryKind local, MemoryKind peer, bool same_host) {
  (void)local;  // host or device sources alike: the writer's GPU copies from either
  if (!same_host) return {false, "the peer runs on another host"};
  if (peer != MemoryKind::kCuda) return {false, "the peer's memory is not device memory"};
  if (ipc_driver() == nullptr) return {false, "no device IPC: " + ipc_driver_absent_reason()};
  return {true, ""};
}

namespace {

constexpr int kTokenWaitMs = 1000;

// The tokens of live, authenticated lease sessions: what the handle socket serves.
class TokenBook {
 public:
  void add(const std::string& token) {
    MutexLock lock(mu_);
    tokens_.insert(token);
  }
  void remove(const std::string& token) {
    MutexLock lock(mu_);
    tokens_.erase(token);
  }
  bool contains(const std::string& token) const {
    MutexLock lock(mu_);
    return tokens_.count(token) != 0;
  }

 private:
  mutable Mutex mu_;
  std::set<std::string> tokens_ PDKV_GUARDED_BY(mu_);
};

// One authenticated sender: its token is valid exactly as long as its lease connection.
class IpcSession final : public lease::LeaseSession {
 public:
  IpcSession(TokenBook* book, std::string token, const std::string& socket_name)
      : book_(book), token_(std::move(token)) {
    book_->add(token_);
    std::vector<uint8_t> out;
    lease::Writer w(out);
    w.bytes(socket_name);
    w.bytes(token_);
    extra_.assign(out.begin(), out.end());
  }
  ~IpcSession() override { book_->remove(token_); }
  std::string hello_extra() override { return extra_; }

 private:
  TokenBook* const book_;
  const std::string token_;
  std::string extra_;
};

class CudaIpcBackend final : public Backend, private lease::LeaseServerHooks {
 public:
  CudaIpcBackend(const BackendContext& ctx, const CudaIpcOptions& options, FdListener listener)
      : ctx_(ctx),
        options_(options),
        listener_(std::move(listener)),
        exports_(ipc_driver()),
        server_(lease::LeaseServerOptions{"cuda_ipc", options.io_timeout_ms,
                                          ctx.options->connect_timeout_ms, ctx.options->cluster_key,
                                          ctx.options->tcp.max_connections},
                ctx.registry, this) {
    handle_thread_ = std::thread([this] { serve_handles(); });
  }

  ~CudaIpcBackend() override {
    stopping_.store(true);
    listener_.shutdown();
    if (handle_thread_.joinable()) handle_thread_.join();
  }

  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.name = "cuda_ipc";
    c.cross_host = false;
    c.software_bounds_check = true;  // every part is admitted by the receiver's lease
    c.wants_memory_hooks = true;     // exports device pieces at registration
    c.authenticates_sessions = true;
    c.device_source = DeviceSupport::kNative;
    c.device_destination = DeviceSupport::kNative;
    c.orders_device_sources = true;
    return c;
  }

  Result<std::string> listen() override {
    return server_.listen(ctx_.options->host, ctx_.options->port);
  }

  Status on_register_memory(uint64_t addr, uint64_t length) override {
    const int device = ctx_.device_regions->device_of(addr, length);
    if (device < 0) return Status();  // host memory: nothing to export (other paths reach it)
    if (ipc_driver() == nullptr) {
      return failed_precondition("cuda_ipc cannot export device memory: " +
                                 ipc_driver_absent_reason());
    }
    PDKV_ASSIGN_OR_RETURN(ScopedDevice bound, ScopedDevice::bind(device_driver(), device));
    return exports_.add_region(addr, length, device);
  }

  Status on_unregister_memory(uint64_t addr, uint64_t) override {
    exports_.remove_region(addr);
    return Status();
  }

  Result<std::unique_ptr<BackendPeer>> connect(const std::string& endpoint) override {
    if (ipc_driver() == nullptr) {
      return failed_precondition("cuda_ipc cannot reach " + endpoint + ": " +
                                 ipc_driver_absent_reason());
    }
    auto client = std::make_unique<lease::LeaseClient>();
    // With a cluster secret the receiver proves it before we learn its handle socket, and
    // we prove it before it lets us near its memory.
    PDKV_RETURN_IF_ERROR(client->connect(endpoint, "cuda_ipc", ctx_.options->connect_timeout_ms,
                                         ctx_.options->cluster_key.get()));
    const lease::PeerHello& hello = client->hello();
    if (hello.host_identity != lease::host_identity()) {
      return failed_precondition(endpoint +
                                 " runs on another host or pid namespace; the cuda_ipc "
                                 "backend only reaches GPUs of this machine");
    }
    lease::Reader in(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(hello.extra.data()),
                                              hello.extra.size()));
    std::string socket_name, token;
    PDKV_RETURN_IF_ERROR(in.bytes(&socket_name));
    PDKV_RETURN_IF_ERROR(in.bytes(&token));
    if (token.size() != kTokenBytes || socket_name.empty() || socket_name.size() > 100) {
      return data_loss(endpoint + " sent a malformed cuda_ipc hello");
    }
    auto peer = std::make_unique<IpcWriter>(
        endpoint, ctx_.sink,
        IpcWriterOptions{options_.part_bytes, options_.io_timeout_ms, socket_name, token},
        ctx_.device_regions);
    PDKV_RETURN_IF_ERROR(peer->fetch_table().with_context(endpoint));
    peer->start(std::move(client));
    return std::unique_ptr<BackendPeer>(std::move(peer));
  }

  Status post(BackendPeer& peer, std::span<const WriteBlock> blocks, uint64_t token) override {
    return static_cast<IpcWriter&>(peer).post(blocks, token);
  }

  Status post_after(BackendPeer& peer, std::span<const WriteBlock> blocks, uint64_t token,
                    std::span<const uint8_t> note, ReadyEvents ready) override {
    if (!note.empty()) return failed_precondition("the cuda_ipc backend does not carry notes");
    auto& writer = static_cast<IpcWriter&>(peer);
    PDKV_RETURN_IF_ERROR(writer.wait_on_device(ready));
    return writer.post(blocks, token);
  }

 private:
  Result<std::unique_ptr<lease::LeaseSession>> open_session() override {
    std::string token(kTokenBytes, '\0');
    PDKV_RETURN_IF_ERROR(
        random_bytes(std::span<uint8_t>(reinterpret_cast<uint8_t*>(token.data()), token.size())));
    return std::unique_ptr<lease::LeaseSession>(
        std::make_unique<IpcSession>(&tokens_, std::move(token), listener_.name()));
  }
  Status regions_payload(std::vector<uint8_t>*) override {
    return failed_precondition("the cuda_ipc backend serves its handles on its own socket");
  }
  uint64_t regions_epoch() override { return exports_.epoch(); }

  // The handle socket: one short exchange per connection, served in turn (each bounded by
  // the I/O timeout, so a caller that says nothing holds it at most that long).
  void serve_handles() {
    while (!stopping_.load()) {
      Result<FdChannel> channel = listener_.accept(200);
      if (!channel.ok() || channel->get() < 0) continue;
      Status st = serve_one(*channel);
      if (!st.ok()) PDKV_LOG_WARN_LIMITED("cuda_ipc handle socket: {}", st.to_string());
    }
  }

  Status serve_one(FdChannel& channel) {
    // A member sends its token as soon as it connected: a caller that dawdles is a
    // stranger holding the socket, so it gets at most a second.
    PDKV_RETURN_IF_ERROR(channel.set_timeout(std::min(options_.io_timeout_ms, kTokenWaitMs)));
    std::vector<uint8_t> request;
    UniqueFd stray;
    PDKV_RETURN_IF_ERROR(channel.receive(&request, &stray));
    PDKV_RETURN_IF_ERROR(channel.set_timeout(options_.io_timeout_ms));
    std::vector<uint8_t> out;
    const std::string token(request.begin(), request.end());
    if (stray.valid() || request.size() != kTokenBytes || !tokens_.contains(token)) {
      encode_header(TableHeader{false, 0, 0, "no live authenticated session has this token"}, &out);
      (void)channel.send(out);
      return unauthenticated("refused a caller without a session token");
    }
    PDKV_ASSIGN_OR_RETURN(ExportTable::Snapshot snap, exports_.snapshot());
    encode_header(TableHeader{true, snap.epoch, static_cast<uint32_t>(snap.entries.size()), ""},
                  &out);
    PDKV_RETURN_IF_ERROR(channel.send(out));
    for (size_t i = 0; i < snap.entries.size(); ++i) {
      out.clear();
      encode_entry(snap.entries[i], &out);
      PDKV_RETURN_IF_ERROR(channel.send(out, snap.fds[i].get()));
    }
    return Status();
  }

  const BackendContext ctx_;
  const CudaIpcOptions options_;
  FdListener listener_;
  TokenBook tokens_;
  ExportTable exports_;
  std::atomic<bool> stopping_{false};
  std::thread handle_thread_;
  lease::LeaseServer server_;  // last: its threads call the hooks above
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_ipc_backend(const BackendContext& ctx,
                                                       const CudaIpcOptions& options) {
  PDKV_ASSIGN_OR_RETURN(FdListener listener, FdListener::listen());
  return std::unique_ptr<Backend>(
      std::make_unique<CudaIpcBackend>(ctx, options, std::move(listener)));
}

Result<std::unique_ptr<Backend>> make_cuda_ipc_backend(const BackendContext& ctx) {
  PDKV_ASSIGN_OR_RETURN(auto options, CudaIpcOptions::from(ctx.options->settings));
  return make_cuda_ipc_backend(ctx, options);
}

}  // namespace pdkv::engine::cuda_ipc
