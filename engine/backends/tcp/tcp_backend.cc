#include "engine/backends/tcp/tcp_backend.h"

#include <atomic>
#include <vector>

#include "common/host_port.h"
#include "common/logging.h"
#include "engine/backends/tcp/part_planner.h"
#include "engine/backends/tcp/tcp_frame.h"
#include "engine/backends/tcp/tcp_receiver.h"
#include "engine/backends/tcp/tcp_sender.h"
#include "engine/device/device_regions.h"
#include "engine/memory_registry.h"

namespace pdkv::engine::tcp {
namespace {

// Marks each entry's source device, and each part's. InvalidArgument for an entry that
// straddles the edge of device memory, or a part that reads two devices. Returns whether
// any entry reads device memory.
Result<bool> mark_source_devices(const DeviceRegions& regions, PartPlan* plan) {
  bool any = false;
  for (PartEntry& e : plan->entries) {
    const DeviceRegions::RunPlace place =
        regions.place_run(e.src_addr, e.length, e.pieces, e.src_stride);
    e.src_device = place.device;
    e.src_piecewise = place.piecewise;
    if (e.src_device == DeviceRegions::kMixed) {
      return invalid_argument(fmt::format(
          "block {} (src {:#x}, length {}) reads across the edge of registered device memory",
          e.block_index, e.src_addr, e.length));
    }
    any = any || e.src_device >= 0;
  }
  for (PlannedPart& part : plan->parts) {
    part.src_device = -1;
    for (uint32_t k = 0; k < part.entry_count; ++k) {
      const int device = plan->entries[part.first_entry + k].src_device;
      if (device < 0) continue;
      if (part.src_device >= 0 && part.src_device != device) {
        return invalid_argument(
            fmt::format("one batch part reads device memory of CUDA devices {} and {}: submit the "
                        "devices' blocks as separate batches",
                        part.src_device, device));
      }
      part.src_device = device;
    }
  }
  return any;
}

class TcpPeer final : public BackendPeer {
 public:
  TcpPeer(std::string endpoint, std::vector<std::unique_ptr<StreamSender>> streams)
      : endpoint_(std::move(endpoint)), streams_(std::move(streams)) {}

  const std::string& endpoint() const override { return endpoint_; }

  Status health() const override {
    for (const auto& s : streams_) {
      Status st = s->health();
      if (!st.ok()) return st;
    }
    return Status();
  }

  // `note` (empty: none) rides the last part, and then every part goes on one stream:
  // a stream applies its parts in order, so the note is handled after all of them.
  Status post(std::span<const WriteBlock> blocks, uint64_t token, CompletionSink* sink,
              const TcpOptions& options, const DeviceRegions& regions,
              std::span<const uint8_t> note, ReadyEvents ready = {}) {
    // A broken stream would fail its share anyway; refusing the whole post up front
    // keeps a dead peer from accepting new work at all.
    PDKV_RETURN_IF_ERROR(health());
    auto post = std::make_shared<PostState>();
    post->token = token;
    post->sink = sink;
    post->ready = std::move(ready);
    const auto streams = note.empty() ? static_cast<uint32_t>(streams_.size()) : 1u;
    PlanLimits limits{streams, options.min_split_bytes, options.max_part_entries};
    // Rotate the starting stream so small batches spread over all streams too.
    const auto first = static_cast<uint32_t>(next_stream_.fetch_add(1, std::memory_order_relaxed) %
                                             streams_.size());
    plan_parts(blocks, limits, first, &post->plan);
    if (!regions.empty()) {
      PDKV_ASSIGN_OR_RETURN(const bool reads_device, mark_source_devices(regions, &post->plan));
      if (reads_device) {
        // Device sources are staged a whole part per pinned slab: plan again, bounded.
        limits.max_part_bytes = options.device_slab_bytes;
        plan_parts(blocks, limits, first, &post->plan);
        PDKV_RETURN_IF_ERROR(mark_source_devices(regions, &post->plan).status());
      }
    }
    const size_t n_parts = post->plan.parts.size();
    post->parts_left.store(n_parts, std::memory_order_relaxed);
    for (size_t i = 0; i < n_parts; ++i) {
      const PlannedPart& part = post->plan.parts[i];
      OutPart out;
      out.post = post;
      out.part_index = static_cast<uint32_t>(i);
      out.src_device = part.src_device;
      const bool noted = !note.empty() && i + 1 == n_parts;
      const size_t table_end = kHeaderSize + size_t{part.entry_count} * kEntrySize;
      out.head.resize(table_end + (noted ? note.size() : 0));
      FrameHeader h;
      h.type = FrameType::kPart;
      h.count = part.entry_count;
      h.payload_bytes = part.bytes;
      if (noted) {
        h.flags = kPartHasNote;
        h.aux = static_cast<uint32_t>(note.size());
        std::copy(note.begin(), note.end(), out.head.begin() + static_cast<ptrdiff_t>(table_end));
      }
      // part_id is filled in by the stream; it is patched into the header there.
      encode_header(h, out.head.data());
      const PartEntry* e = post->plan.entries.data() + part.first_entry;
      for (uint32_t k = 0; k < part.entry_count; ++k) {
        encode_entry(WireEntry{e[k].dst_addr, e[k].length, e[k].pieces,
                               e[k].pieces > 1 ? e[k].dst_stride : 0, e[k].grant},
                     out.head.data() + kHeaderSize + k * kEntrySize);
      }
      streams_[part.stream]->enqueue(std::move(out));
    }
    return Status();
  }

 private:
  const std::string endpoint_;
  const std::vector<std::unique_ptr<StreamSender>> streams_;
  std::atomic<uint64_t> next_stream_{0};
};

class TcpBackend final : public Backend {
 public:
  explicit TcpBackend(const BackendContext& ctx)
      : options_(*ctx.options),
        sink_(ctx.sink),
        regions_(ctx.device_regions),
        receiver_(options_.tcp, ctx.registry, ctx.device_regions, options_.cluster_key, ctx.notes) {
  }

  BackendCapabilities capabilities() const override {
    return BackendCapabilities{"tcp",
                               /*cross_host=*/true,
                               /*software_bounds_check=*/true,
                               /*wants_memory_hooks=*/false,
                               /*authenticates_sessions=*/true,
                               /*carries_notes=*/true,
                               /*device_source=*/DeviceSupport::kStaged,
                               /*device_destination=*/DeviceSupport::kStaged,
                               /*orders_device_sources=*/true};
  }

  Result<std::string> listen() override {
    uint16_t port = 0;
    PDKV_ASSIGN_OR_RETURN(UniqueFd fd,
                          listen_tcp(options_.host, static_cast<uint16_t>(options_.port), &port));
    receiver_.start(std::move(fd));
    return format_host_port(options_.host, port);
  }

  Status on_register_memory(uint64_t, uint64_t) override { return Status(); }
  Status on_unregister_memory(uint64_t, uint64_t) override { return Status(); }

  Result<std::unique_ptr<BackendPeer>> connect(const std::string& endpoint) override {
    std::vector<std::unique_ptr<StreamSender>> streams;
    streams.reserve(static_cast<size_t>(options_.tcp.streams));
    for (int i = 0; i < options_.tcp.streams; ++i) {
      auto s = StreamSender::connect(endpoint, static_cast<uint32_t>(streams.size()), options_);
      if (s.ok()) {
        streams.push_back(std::move(s).value());
        continue;
      }
      // The first stream failing says the peer is unreachable: report it (the caller
      // retries). A later one failing (a reset, a full backlog) costs parallelism only: the
      // streams already up carry the session, rather than failing it.
      if (streams.empty()) return s.status();
      PDKV_LOG_WARN("tcp session to {} runs on {} of {} streams: {}", endpoint, streams.size(),
                    options_.tcp.streams, s.status().to_string());
      break;
    }
    return std::unique_ptr<BackendPeer>(new TcpPeer(endpoint, std::move(streams)));
  }

  Status post(BackendPeer& peer, std::span<const WriteBlock> blocks, uint64_t token) override {
    return static_cast<TcpPeer&>(peer).post(blocks, token, sink_, options_.tcp, *regions_, {});
  }
  Status post_with_note(BackendPeer& peer, std::span<const WriteBlock> blocks, uint64_t token,
                        std::span<const uint8_t> note) override {
    if (note.empty() || note.size() > kMaxNoteBytes) {
      return invalid_argument("a batch note has 1 to " + std::to_string(kMaxNoteBytes) +
                              " bytes, not " + std::to_string(note.size()));
    }
    return static_cast<TcpPeer&>(peer).post(blocks, token, sink_, options_.tcp, *regions_, note);
  }
  Status post_after(BackendPeer& peer, std::span<const WriteBlock> blocks, uint64_t token,
                    std::span<const uint8_t> note,
                    ReadyEvents ready) override {
    if (note.size() > kMaxNoteBytes) {
      return invalid_argument("a batch note has at most " + std::to_string(kMaxNoteBytes) +
                              " bytes, not " + std::to_string(note.size()));
    }
    return static_cast<TcpPeer&>(peer).post(blocks, token, sink_, options_.tcp, *regions_, note,
                                            std::move(ready));
  }

 private:
  const EngineOptions options_;
  CompletionSink* const sink_;
  const DeviceRegions* const regions_;
  TcpReceiver receiver_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendContext& ctx) {
  return std::unique_ptr<Backend>(new TcpBackend(ctx));
}

}  // namespace pdkv::engine::tcp
