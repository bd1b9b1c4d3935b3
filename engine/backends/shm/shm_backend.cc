#include "engine/backends/shm/shm_backend.h"

#include <unistd.h>

#include <thread>
#include <vector>

#include "common/config.h"
#include "common/logging.h"
#include "engine/backends/shm/cma_writer.h"
#include "engine/backends/shm/shm_settings.h"
#include "engine/device/device_regions.h"
#include "engine/lease/lease_server.h"
#include "engine/lease/leased_peer.h"
#include "engine/lease/wire.h"

namespace pdkv::engine::shm {

Result<ShmOptions> ShmOptions::from(const config::Settings& settings) {
  ShmOptions o;
  PDKV_ASSIGN_OR_RETURN(int64_t threads, config::read<kShmCopyThreads>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t part, config::read<kShmPartBytes>(settings));
  PDKV_ASSIGN_OR_RETURN(int64_t timeout, config::read<kShmIoTimeoutMs>(settings));
  o.copy_threads = static_cast<int>(threads);
  o.part_bytes = static_cast<uint64_t>(part);
  o.io_timeout_ms = static_cast<int>(timeout);
  return o;
}

namespace {

// Parts below this are copied by the sender thread alone: a helper thread costs more
// than it saves.
constexpr uint64_t kParallelCopyBytes = 4ull << 20;

class ShmPeer final : public lease::LeasedPeer {
 public:
  ShmPeer(std::string endpoint, CompletionSink* sink, const ShmOptions& options, pid_t pid)
      : lease::LeasedPeer(
            std::move(endpoint), sink,
            lease::LeasedPeerOptions{options.part_bytes, 1u << 16, options.io_timeout_ms}),
        pid_(pid),
        copy_threads_(options.copy_threads) {}
  ~ShmPeer() override { stop(); }

 protected:
  Status write_part(std::span<const lease::Piece> pieces, const lease::Grant&,
                    TimePoint deadline) override {
    uint64_t total = 0;
    for (const auto& p : pieces) total += p.length;
    size_t k = copy_threads_;
    if (k <= 1 || total < kParallelCopyBytes || pieces.size() < 2) {
      return cma_write(pid_, pieces, deadline);
    }
    // Split pieces into k runs of about equal bytes; run 0 stays on this thread.
    std::vector<size_t> cuts{0};
    uint64_t acc = 0;
    for (size_t i = 0; i < pieces.size() && cuts.size() < k; ++i) {
      acc += pieces[i].length;
      if (acc >= total * cuts.size() / k) cuts.push_back(i + 1);
    }
    cuts.push_back(pieces.size());
    std::vector<Status> results(cuts.size() - 1);
    std::vector<std::thread> helpers;
    for (size_t r = 1; r + 1 < cuts.size(); ++r) {
      helpers.emplace_back([&, r] {
        results[r] = cma_write(pid_, pieces.subspan(cuts[r], cuts[r + 1] - cuts[r]), deadline);
      });
    }
    results[0] = cma_write(pid_, pieces.subspan(0, cuts[1]), deadline);
    for (auto& t : helpers) t.join();
    for (auto& s : results) {
      if (!s.ok()) return s;
    }
    return Status();
  }

 private:
  const pid_t pid_;
  const size_t copy_threads_;
};

class ShmBackend final : public Backend, private lease::LeaseServerHooks {
 public:
  ShmBackend(const BackendContext& ctx, const ShmOptions& options)
      : ctx_(ctx),
        options_(options),
        server_(
            lease::LeaseServerOptions{"shm", options.io_timeout_ms, ctx.options->connect_timeout_ms,
                                      ctx.options->cluster_key, ctx.options->tcp.max_connections},
            ctx.registry, this) {}

  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.name = "shm";
    c.cross_host = false;
    c.software_bounds_check = true;
    c.authenticates_sessions = true;  // the lease channel's handshake (lease_auth.h)
    c.wants_memory_hooks = false;
    return c;
  }

  Result<std::string> listen() override {
    return server_.listen(ctx_.options->host, ctx_.options->port);
  }

  Status on_register_memory(uint64_t, uint64_t) override { return Status(); }
  Status on_unregister_memory(uint64_t, uint64_t) override { return Status(); }

  Result<std::unique_ptr<BackendPeer>> connect(const std::string& endpoint) override {
    auto client = std::make_unique<lease::LeaseClient>();
    // With a cluster secret the receiver proves it before we learn its pid: a stranger
    // posing as a decode is never probed nor written by CMA.
    PDKV_RETURN_IF_ERROR(client->connect(endpoint, "shm", ctx_.options->connect_timeout_ms,
                                         ctx_.options->cluster_key.get()));
    const lease::PeerHello& hello = client->hello();
    if (hello.host_identity != lease::host_identity()) {
      return failed_precondition(endpoint +
                                 " runs on another host or pid namespace; the "
                                 "shm backend only reaches engines on this machine");
    }
    lease::Reader in(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(hello.extra.data()),
                                              hello.extra.size()));
    uint64_t probe_addr = 0;
    PDKV_RETURN_IF_ERROR(in.u64(&probe_addr));
    auto pid = static_cast<pid_t>(hello.pid);
    PDKV_RETURN_IF_ERROR(
        cma_probe(pid, probe_addr, static_cast<uint64_t>(::getpid())).with_context(endpoint));
    auto peer = std::make_unique<ShmPeer>(endpoint, ctx_.sink, options_, pid);
    peer->start(std::move(client));
    return std::unique_ptr<BackendPeer>(std::move(peer));
  }

  Status post(BackendPeer& peer, std::span<const WriteBlock> blocks, uint64_t token) override {
    return static_cast<ShmPeer&>(peer).post(blocks, token);
  }

 private:
  Result<std::unique_ptr<lease::LeaseSession>> open_session() override {
    std::vector<uint8_t> out;
    lease::Writer(out).u64(reinterpret_cast<uint64_t>(&probe_word_));
    return std::unique_ptr<lease::LeaseSession>(
        std::make_unique<lease::FixedLeaseSession>(std::string(out.begin(), out.end())));
  }
  Status regions_payload(std::vector<uint8_t>*) override {
    return failed_precondition("the shm backend has no region table to serve");
  }
  uint64_t regions_epoch() override { return 0; }
  // An automatic engine registers device memory for its tcp path; CMA cannot write it,
  // and on a fake device (a memfd) it would write the host mapping behind the driver's back.
  size_t unwritable(std::span<const DstRange> ranges, std::string* why) override {
    if (ctx_.device_regions == nullptr || ctx_.device_regions->empty()) return ranges.size();
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (ctx_.device_regions->device_of(ranges[i].addr, ranges[i].length) >= 0) {
        *why = "is device memory, which the shm backend cannot write (its peer must use tcp)";
        return i;
      }
    }
    return ranges.size();
  }

  const BackendContext ctx_;
  const ShmOptions options_;
  // Written only by peers (the CMA permission probe), never read.
  alignas(64) volatile uint64_t probe_word_ = 0;
  lease::LeaseServer server_;  // last: its threads call the hooks above
};

}  // namespace

Result<std::unique_ptr<Backend>> make_shm_backend(const BackendContext& ctx,
                                                  const ShmOptions& options) {
  return std::unique_ptr<Backend>(std::make_unique<ShmBackend>(ctx, options));
}

Result<std::unique_ptr<Backend>> make_shm_backend(const BackendContext& ctx) {
  PDKV_ASSIGN_OR_RETURN(auto options, ShmOptions::from(ctx.options->settings));
  return make_shm_backend(ctx, options);
}

}  // namespace pdkv::engine::shm
