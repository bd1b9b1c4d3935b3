#include "engine/backends/cuda_ipc/ipc_writer.h"

#include <fmt/format.h>

#include "common/logging.h"
#include "engine/backends/cuda_ipc/fd_channel.h"
#include "engine/backends/cuda_ipc/handle_wire.h"
#include "engine/device/device_regions.h"

namespace pdkv::engine::cuda_ipc {

// Equally spaced pieces become one 2-D copy from this many on; fewer join the batched copy
// (shuffled pages fall into short spaced runs by chance, and one batch holds them all).
constexpr size_t kMinStridedRun = 4;

WriterCounters& writer_counters() {
  static WriterCounters counters;
  return counters;
}

IpcWriter::IpcWriter(std::string endpoint, CompletionSink* sink, IpcWriterOptions options,
                     const DeviceRegions* device_regions)
    : lease::LeasedPeer(
          std::move(endpoint), sink,
          lease::LeasedPeerOptions{options.part_bytes, 1u << 16, options.io_timeout_ms}),
      options_(std::move(options)),
      device_regions_(device_regions),
      driver_(device_driver()),
      ipc_(ipc_driver()),
      imports_(ipc_) {}

IpcWriter::~IpcWriter() {
  stop();  // the sender thread is gone: nothing uses the mappings or the stream now
  int device = -1;
  {
    MutexLock lock(mu_);
    device = device_;
  }
  if (device < 0) return;
  Result<ScopedDevice> bound = ScopedDevice::bind(driver_, device);
  if (!bound.ok()) return;  // the context is gone; so are its mappings
  (void)driver_->sync_stream(stream_);
  imports_.close_all();
  driver_->destroy_event(done_);
  driver_->destroy_stream(stream_);
}

Status IpcWriter::fetch_table() {
  PDKV_ASSIGN_OR_RETURN(FdChannel channel,
                        FdChannel::connect(options_.socket_name, options_.io_timeout_ms));
  PDKV_RETURN_IF_ERROR(channel.send(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(options_.token.data()), options_.token.size())));
  std::vector<uint8_t> record;
  UniqueFd fd;
  PDKV_RETURN_IF_ERROR(channel.receive(&record, &fd));
  if (fd.valid()) return data_loss("device-handle table: a descriptor on the header");
  PDKV_ASSIGN_OR_RETURN(TableHeader header, decode_header(record));
  if (!header.ok) return unauthenticated("the receiver refused its handles: " + header.message);
  std::vector<HandleEntry> entries;
  std::vector<UniqueFd> fds;
  entries.reserve(header.count);
  for (uint32_t i = 0; i < header.count; ++i) {
    PDKV_RETURN_IF_ERROR(channel.receive(&record, &fd));
    PDKV_ASSIGN_OR_RETURN(HandleEntry entry, decode_entry(record));
    entries.push_back(entry);
    fds.push_back(std::move(fd));
  }
  // Every GPU the receiver exports from must be one this process sees.
  for (const HandleEntry& e : entries) {
    if (ipc_->device_with_uuid(e.device) < 0) {
      return failed_precondition(
          "the receiver's GPU is not visible to this process (CUDA_VISIBLE_DEVICES differs); "
          "cuda_ipc needs both GPUs visible to the writer");
    }
  }
  return imports_.replace(header.epoch, std::move(entries), std::move(fds));
}

Status IpcWriter::check_peer_access(int device) {
  for (const HandleEntry& e : imports_.entries()) {
    const int peer = ipc_->device_with_uuid(e.device);
    PDKV_ASSIGN_OR_RETURN(bool can, ipc_->can_access_peer(device, peer));
    if (!can) {
      return failed_precondition(fmt::format(
          "GPU {} cannot access GPU {} directly (no peer access: cuDeviceCanAccessPeer); "
          "use a staged path (tcp) for this pair",
          device, peer));
    }
  }
  return Status();
}

Status IpcWriter::use_device(int hint) {
  MutexLock lock(mu_);
  if (device_ >= 0) return Status();
  PDKV_ASSIGN_OR_RETURN(ScopedDevice bound, ScopedDevice::bind(driver_, hint));
  PDKV_ASSIGN_OR_RETURN(stream_, driver_->create_stream());
  Result<DeviceEventHandle> event = driver_->create_event();
  if (!event.ok()) {
    driver_->destroy_stream(stream_);
    return event.status();
  }
  done_ = *event;
  device_ = hint;
  return Status();
}

Status IpcWriter::wait_on_device(const ReadyEvents& ready) {
  if (ready.empty()) return Status();
  PDKV_RETURN_IF_ERROR(use_device(ready.front()->device()));
  int device;
  {
    MutexLock lock(mu_);
    device = device_;
  }
  PDKV_ASSIGN_OR_RETURN(ScopedDevice bound, ScopedDevice::bind(driver_, device));
  for (const auto& event : ready)
    PDKV_RETURN_IF_ERROR(driver_->stream_wait(stream_, event->handle()));
  return Status();
}

// Translates every piece, or fails the part before a single copy was issued.
Status IpcWriter::translate(std::span<const lease::Piece> pieces) {
  local_.clear();
  piece_ends_.clear();
  int device;
  {
    MutexLock lock(mu_);
    device = device_;
  }
  bool refetched = false;
  for (const lease::Piece& p : pieces) {
    if (device_regions_->device_of(p.src_addr, p.length) == DeviceRegions::kMixed) {
      return invalid_argument(
          fmt::format("block {} (src {:#x}, length {}) straddles device and "
                      "host memory",
                      p.index, p.src_addr, p.length));
    }
    uint64_t remote_end = 0;
    PDKV_ASSIGN_OR_RETURN(uint64_t local,
                          imports_.translate(p.dst_addr, p.length, device, &remote_end));
    if (local == 0 && !refetched) {
      // Registered after our last fetch (its export may have landed after the grant).
      refetched = true;
      PDKV_RETURN_IF_ERROR(fetch_table());
      PDKV_ASSIGN_OR_RETURN(local, imports_.translate(p.dst_addr, p.length, device, &remote_end));
    }
    if (local == 0) {
      return out_of_range(
          fmt::format("block {} (dst {:#x}, length {}) lies in no device memory {} exported",
                      p.index, p.dst_addr, p.length, endpoint()));
    }
    local_.push_back(Local{p.src_addr, local, p.length});
    piece_ends_.push_back(local + (remote_end - p.dst_addr));  // end of its piece, here
  }
  return Status();
}

Status IpcWriter::issue_copies() {
  d2d_.clear();
  h2d_.clear();
  WriterCounters& counters = writer_counters();
  for (size_t i = 0; i < local_.size();) {
    const Local& first = local_[i];
    const int src_device = device_regions_->device_of(first.src, first.length);
    size_t count = 1;
    uint64_t src_pitch = 0, dst_pitch = 0;
    if (i + 1 < local_.size() && local_[i + 1].length == first.length) {
      src_pitch = local_[i + 1].src - first.src;
      dst_pitch = local_[i + 1].dst - first.dst;
      const bool spaced = src_pitch >= first.length && dst_pitch >= first.length &&
                          src_pitch <= kMaxCopyPitch && dst_pitch <= kMaxCopyPitch;
      while (spaced && i + count < local_.size()) {
        const Local& next = local_[i + count];
        if (next.length != first.length || next.src != first.src + count * src_pitch ||
            next.dst != first.dst + count * dst_pitch) {
          break;
        }
        ++count;
      }
      if (count > 1) {
        // A strided copy stays inside one allocation on each side.
        const uint64_t dst_last_end = first.dst + (count - 1) * dst_pitch + first.length;
        const auto place = device_regions_->place_run(first.src, first.length, count, src_pitch);
        if (dst_last_end > piece_ends_[i] || place.device != src_device || place.piecewise) {
          count = 1;
        }
      }
    }
    const bool contiguous = count > 1 && src_pitch == first.length && dst_pitch == first.length;
    if (!contiguous && count < kMinStridedRun) count = 1;  // scattered: the batch takes it
    if (count > 1 && !contiguous) {
      StridedCopy c{first.dst, dst_pitch, first.src, src_pitch, first.length, count, true};
      PDKV_RETURN_IF_ERROR(src_device >= 0 ? ipc_->copy_strided(stream_, c)
                                           : driver_->copy_strided(stream_, c));
      counters.strided.fetch_add(1, std::memory_order_relaxed);
    } else {
      (src_device >= 0 ? d2d_ : h2d_)
          .push_back(CopyPiece{first.dst, first.src, first.length * count});
    }
    i += count;
  }
  if (!d2d_.empty()) {
    PDKV_RETURN_IF_ERROR(ipc_->copy_batch(stream_, d2d_));
    counters.batches.fetch_add(ipc_->batches_copies() ? 1 : d2d_.size(), std::memory_order_relaxed);
  }
  if (!h2d_.empty()) {
    PDKV_RETURN_IF_ERROR(driver_->copy_batch(stream_, h2d_, /*to_device=*/true));
    counters.batches.fetch_add(driver_->batches_copies() ? 1 : h2d_.size(),
                               std::memory_order_relaxed);
  }
  counters.pieces.fetch_add(local_.size(), std::memory_order_relaxed);
  return Status();
}

Status IpcWriter::write_part(std::span<const lease::Piece> pieces, const lease::Grant& grant,
                             TimePoint lease_deadline) {
  if (grant.regions_epoch != imports_.epoch()) PDKV_RETURN_IF_ERROR(fetch_table());
  int hint = -1;
  for (const lease::Piece& p : pieces) {
    hint = device_regions_->device_of(p.src_addr, p.length);
    if (hint >= 0) break;
  }
  if (hint < 0) {  // host sources only: copy with the receiver's GPU if we see it, else 0
    const auto entries = imports_.entries();
    hint = entries.empty() ? 0 : std::max(0, ipc_->device_with_uuid(entries.front().device));
  }
  PDKV_RETURN_IF_ERROR(use_device(hint));
  int device;
  {
    MutexLock lock(mu_);
    device = device_;
  }
  PDKV_RETURN_IF_ERROR(driver_->bind_thread(device));
  if (checked_epoch_ != imports_.epoch()) {
    PDKV_RETURN_IF_ERROR(check_peer_access(device));
    checked_epoch_ = imports_.epoch();
  }
  PDKV_RETURN_IF_ERROR(translate(pieces));
  if (now() >= lease_deadline) return deadline_exceeded("the lease ran out before the copies");
  PDKV_RETURN_IF_ERROR(issue_copies());
  PDKV_RETURN_IF_ERROR(driver_->record(done_, stream_));
  // Done means landed: the receiver is told only after every copy completed.
  return driver_->event_wait(done_);
}

}  // namespace pdkv::engine::cuda_ipc
