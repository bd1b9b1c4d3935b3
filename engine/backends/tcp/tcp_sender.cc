#include "engine/backends/tcp/tcp_sender.h"

#include <limits.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/logging.h"
#include "engine/backends/tcp/device_copies.h"
#include "engine/backends/tcp/tcp_auth.h"
#include "engine/backends/tcp/tcp_frame.h"
#include "engine/piece_cursor.h"

namespace pdkv::engine::tcp {
namespace {

constexpr int kMaxIov = IOV_MAX < 1024 ? IOV_MAX : 1024;
constexpr size_t kAckBufBytes = 64 * 1024;
constexpr int kCopyErrorPollMs = 20;

// Whether `e` goes out through the staging buffer (TcpOptions::stage_max_bytes): small
// single pieces only; a run's pieces are gathered straight from their sources.
bool is_staged(const PartEntry& e, uint64_t stage_max) {
  return e.pieces == 1 && e.length <= stage_max;
}

// Runs on a driver thread once a slab's copies landed: wakes the stream's thread.
void wake_stream(void* wake) { static_cast<const EventFd*>(wake)->signal(); }

}  // namespace

void PostState::part_done(const Status& status) {
  if (!status.ok()) {
    MutexLock lock(error_mu);
    if (first_error.ok()) first_error = status;
  }
  if (parts_left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    Status result;
    {
      MutexLock lock(error_mu);
      result = first_error;
    }
    sink->on_complete(token, std::move(result));
  }
}

Result<std::unique_ptr<StreamSender>> StreamSender::connect(const std::string& endpoint,
                                                            uint32_t stream_index,
                                                            const EngineOptions& options) {
  PDKV_ASSIGN_OR_RETURN(UniqueFd fd, connect_tcp(endpoint, options.connect_timeout_ms));
  tune_socket(fd.get(), options.tcp);
  if (options.cluster_key) {
    Status auth =
        authenticate_to_receiver(fd.get(), *options.cluster_key, options.connect_timeout_ms);
    if (!auth.ok()) {
      return Status(auth.code(), "handshake with " + endpoint + ": " + auth.message());
    }
  }
  uint8_t hello[kHeaderSize];
  FrameHeader h;
  h.type = FrameType::kHello;
  h.aux = stream_index;
  encode_header(h, hello);
  const int t = options.connect_timeout_ms;
  Status st = write_full(fd.get(), hello, sizeof hello, -1, t);
  uint8_t reply[kHeaderSize];
  if (st.ok()) st = read_full(fd.get(), reply, sizeof reply, -1, t, t);
  if (st.ok()) {
    Result<FrameHeader> r = decode_header(std::span<const uint8_t>(reply, sizeof reply), 1);
    if (!r.ok()) {
      st = r.status();
    } else if (r->type == FrameType::kAck) {
      st = read_refusal(fd.get(), *r, t);
    } else if (r->type != FrameType::kHelloAck) {
      st = data_loss("peer did not answer HELLO with HELLO_ACK");
    }
  }
  if (!st.ok()) return unavailable("handshake with " + endpoint + ": " + st.to_string());
  return std::unique_ptr<StreamSender>(new StreamSender(std::move(fd), endpoint, options.tcp));
}

StreamSender::StreamSender(UniqueFd fd, std::string endpoint, const TcpOptions& options)
    : endpoint_(std::move(endpoint)), options_(options) {
  {
    MutexLock io(io_mu_);
    fd_ = std::move(fd);
    ack_buf_.resize(kAckBufBytes);
    last_progress_ = now();
  }
  thread_ = std::thread([this] { run(); });
}

StreamSender::~StreamSender() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  wake_.signal();
  thread_.join();
  std::vector<Ended> ended;
  {
    MutexLock io(io_mu_);
    fail_all(aborted("stream to " + endpoint_ + " closed"), &ended);
  }
  complete(&ended);
}

Status StreamSender::health() const {
  MutexLock lock(mu_);
  return broken_;
}

void StreamSender::complete(std::vector<Ended>* ended) {
  for (Ended& e : *ended) e.post->part_done(e.status);
  ended->clear();
}

void StreamSender::enqueue(OutPart part) {
  const bool small = part.src_device < 0 && wire_bytes(part) <= options_.inline_write_max_bytes;
  Status broken;
  {
    MutexLock lock(mu_);
    if (broken_.ok() && !stop_) {
      queued_.push_back(std::move(part));
    } else {
      broken = broken_.ok() ? aborted("stream closing") : broken_;
    }
  }
  if (!broken.ok()) {
    part.post->part_done(broken);
    return;
  }
  if (small && write_inline()) return;
  wake_.signal();
}

uint64_t StreamSender::wire_bytes(const OutPart& part) {
  return part.head.size() + part.post->plan.parts[part.part_index].bytes;
}

bool StreamSender::write_inline() {
  // A busy stream (its thread at work, another inline writer) takes the part itself.
  if (!io_mu_.try_lock()) return false;
  bool all_sent = false;
  if (fd_.valid() && sending_.empty()) {
    take_queued();
    // One small part only: what others queued meanwhile may be large (or the thread may
    // have sent ours already and this is theirs).
    if (sending_.size() == 1 && sending_.front().src_device < 0 &&
        wire_bytes(sending_.front()) <= options_.inline_write_max_bytes) {
      std::vector<Ended> none;  // an inline writer never ends a part
      all_sent = write_some(true, &none) == WriteOutcome::kAllSent;
      last_progress_ = now();
    }
  }
  io_mu_.unlock();
  return all_sent;
}

void StreamSender::take_queued() {
  MutexLock lock(mu_);
  while (!queued_.empty()) {
    sending_.push_back(std::move(queued_.front()));
    queued_.pop_front();
    OutPart& part = sending_.back();
    if (part.src_device >= 0) ++unstaged_device_parts_;
    part.part_id = next_part_id_++;
    put_u64(part.head.data() + 8, part.part_id);  // header offset 8: part_id
  }
}

void StreamSender::fail_all(const Status& status, std::vector<Ended>* ended) {
  std::deque<OutPart> queued;
  {
    MutexLock lock(mu_);
    if (broken_.ok()) broken_ = status;
    queued.swap(queued_);
  }
  if (fd_.valid()) {
    const bool idle = awaiting_.empty() && sending_.empty() && queued.empty();
    if (idle && status.code() == StatusCode::kAborted) {
      PDKV_LOG_DEBUG("tcp stream to {} closed", endpoint_);
    } else if (idle) {
      // Nothing in flight: a peer that went away between transfers (a decode shutting
      // down) loses nothing; the next transfer to it reports the error if it matters.
      PDKV_LOG_INFO("idle tcp stream to {} ended: {}", endpoint_, status.to_string());
    } else {
      PDKV_LOG_WARN("tcp stream to {} failed: {}", endpoint_, status.to_string());
    }
    ::shutdown(fd_.get(), SHUT_RDWR);
    fd_.reset();
  }
  for (auto* list : {&awaiting_, &sending_, &queued}) {
    for (OutPart& p : *list) {
      release_slab(p);
      ended->push_back(Ended{std::move(p.post), status});
    }
    list->clear();
  }
  head_sent_ = 0;
  device_sent_ = 0;
  unstaged_device_parts_ = 0;
  waiting_copy_ = false;
  entry_cursor_ = 0;
  entry_offset_ = 0;
  staged_end_ = 0;
}

void StreamSender::stage_next_run(const PartEntry* entries, uint32_t entry_count) {
  uint32_t end = entry_cursor_;
  uint64_t bytes = 0;
  while (end < entry_count && is_staged(entries[end], options_.stage_max_bytes) &&
         (end == entry_cursor_ || bytes + entries[end].length <= options_.stage_buffer_bytes)) {
    bytes += entries[end].length;
    ++end;
  }
  uint8_t* stage = stage_.reserve(bytes);
  uint64_t at = 0;
  for (uint32_t e = entry_cursor_; e < end; ++e) {
    std::memcpy(stage + at, reinterpret_cast<const void*>(entries[e].src_addr), entries[e].length);
    at += entries[e].length;
  }
  staged_end_ = end;
  stage_len_ = bytes;
  stage_sent_ = 0;
}

Result<DeviceSlabRing*> StreamSender::ring_for(int device) {
  const auto index = static_cast<size_t>(device);
  if (rings_.size() <= index) rings_.resize(index + 1);
  std::unique_ptr<DeviceSlabRing>& ring = rings_[index];
  // A ring whose stream failed is replaced once none of its slabs is in use.
  if (ring && ring->broken() && ring->all_free()) ring.reset();
  if (!ring) {
    DeviceDriver* driver = device_driver();
    if (driver == nullptr) {
      return failed_precondition("no device driver for device " + std::to_string(device) + ": " +
                                 device_driver_absent_reason());
    }
    PDKV_ASSIGN_OR_RETURN(
        ring, DeviceSlabRing::create(driver, device, static_cast<size_t>(options_.device_slabs),
                                     options_.device_slab_bytes));
  }
  return ring.get();
}

Status StreamSender::stage_into_slab(OutPart& part, DeviceSlabRing& ring) {
  DeviceDriver* driver = ring.driver();
  PDKV_RETURN_IF_ERROR(driver->bind_thread(ring.device()));
  for (const auto& ready : part.post->ready) {
    // The model's stream wrote these sources: the copies wait for it, on the device.
    PDKV_RETURN_IF_ERROR(driver->stream_wait(ring.stream(), ready->handle()));
  }
  const PlannedPart& plan = part.post->plan.parts[part.part_index];
  const PartEntry* entries = part.post->plan.entries.data() + plan.first_entry;
  // The whole part in one walk, so its scattered pieces go out as one batched copy.
  stage_runs_.clear();
  uint64_t bytes = 0;
  for (uint32_t k = 0; k < plan.entry_count; ++k) {
    const PartEntry& e = entries[k];
    stage_runs_.push_back(PayloadRun{e.src_addr, e.length, e.pieces,
                                     e.pieces > 1 ? e.src_stride : 0, e.src_device,
                                     e.src_piecewise});
    bytes += stage_runs_.back().bytes();
  }
  PayloadCursor cursor;
  PDKV_RETURN_IF_ERROR(copy_payload(driver, ring.stream(), stage_runs_, 0, bytes,
                                    ring.slab(static_cast<size_t>(part.slab)),
                                    SlabDirection::kToSlab, &cursor));
  const DeviceEventHandle event = ring.event(static_cast<size_t>(part.slab));
  PDKV_RETURN_IF_ERROR(driver->record(event, ring.stream()));
  return driver->call_when_done(ring.stream(), &wake_stream, &wake_);
}

void StreamSender::stage_device_parts() {
  // Host-only traffic never walks the queue here (this runs on every write pass).
  for (auto it = sending_.begin(); unstaged_device_parts_ > 0 && it != sending_.end(); ++it) {
    OutPart& part = *it;
    if (part.src_device < 0 || part.slab >= 0 || !part.stage_error.ok()) continue;
    Result<DeviceSlabRing*> ring = ring_for(part.src_device);
    if (!ring.ok()) {
      part.stage_error = ring.status();
      --unstaged_device_parts_;
      continue;
    }
    if ((*ring)->broken()) return;  // its slabs drain first (ring_for replaces it then)
    part.slab = (*ring)->take_free();
    if (part.slab < 0) return;  // in order: later parts wait for this one's slab
    --unstaged_device_parts_;
    Status issued = stage_into_slab(part, **ring);
    if (!issued.ok()) {
      (*ring)->mark_broken();
      part.stage_error = issued;
    }
  }
}

void StreamSender::release_slab(OutPart& part) {
  if (part.slab < 0) return;
  const auto index = static_cast<size_t>(part.src_device);
  if (index < rings_.size() && rings_[index]) rings_[index]->give_back(part.slab);
  part.slab = -1;
}

void StreamSender::unstage_after_failed_copy(int device) {
  // The front part's copies failed, and a driver's stream error is sticky: the copies of
  // the parts staged behind it on the same stream never ran. Those parts are not the
  // failure's: they give their slabs back (the broken ring is replaced once all are
  // back) and are staged again on a fresh stream, so only the part whose copy failed
  // fails its batch.
  for (auto it = std::next(sending_.begin()); it != sending_.end(); ++it) {
    if (it->src_device != device || it->slab < 0 || !it->stage_error.ok()) continue;
    release_slab(*it);
    ++unstaged_device_parts_;
  }
}

bool StreamSender::device_part_ready(OutPart& part, bool* failed, std::vector<Ended>* ended) {
  *failed = false;
  Status error = part.stage_error;
  if (error.ok()) {
    if (part.slab < 0) return false;
    if (head_sent_ > 0 || device_sent_ > 0) return true;  // already checked and started
    DeviceSlabRing& ring = *rings_[static_cast<size_t>(part.src_device)];
    Status bound = ring.driver()->bind_thread(ring.device());
    Result<bool> done = bound.ok()
                            ? ring.driver()->event_done(ring.event(static_cast<size_t>(part.slab)))
                            : Result<bool>(bound);
    if (done.ok()) return *done;
    ring.mark_broken();
    error = done.status();
    unstage_after_failed_copy(part.src_device);
  }
  // Nothing of the part was sent: it fails alone and the stream goes on. FailedPrecondition
  // (the driver's code stays in the message) says the failure is about these blocks, not
  // the connection: the KV pipeline then fails the batch's rooms only, and neither closes
  // the session nor counts it against the decode (which would fail the decode's other
  // rooms for a cooldown).
  *failed = true;
  PDKV_LOG_WARN_LIMITED("tcp stream to {}: staging a part from CUDA device {} failed: {}",
                        endpoint_, part.src_device, error.to_string());
  release_slab(part);
  ended->push_back(Ended{
      std::move(part.post),
      failed_precondition("staging device memory for " + endpoint_ + ": " + error.to_string())});
  sending_.pop_front();
  return false;
}

ssize_t StreamSender::send_some(iovec* iov, int n_iov, bool inline_writer,
                                std::vector<Ended>* ended, WriteOutcome* stopped) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(n_iov);
  const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return n;
  if (errno == EINTR) return 0;
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    *stopped = WriteOutcome::kBlocked;
  } else {
    if (!inline_writer) {
      fail_all(unavailable("send to " + endpoint_ + ": " + std::strerror(errno)), ended);
    }
    *stopped = WriteOutcome::kBroken;
  }
  return -1;
}

StreamSender::WriteOutcome StreamSender::write_device_part(OutPart& part, bool inline_writer,
                                                           std::vector<Ended>* ended) {
  const uint64_t payload = part.post->plan.parts[part.part_index].bytes;
  const uint8_t* slab =
      rings_[static_cast<size_t>(part.src_device)]->slab(static_cast<size_t>(part.slab));
  while (head_sent_ < part.head.size() || device_sent_ < payload) {
    iovec iov[2];
    int n_iov = 0;
    if (head_sent_ < part.head.size()) {
      iov[n_iov++] = iovec{part.head.data() + head_sent_, part.head.size() - head_sent_};
    }
    iov[n_iov++] = iovec{const_cast<uint8_t*>(slab) + device_sent_, payload - device_sent_};
    WriteOutcome stopped = WriteOutcome::kAllSent;
    const ssize_t n = send_some(iov, n_iov, inline_writer, ended, &stopped);
    if (n < 0) return stopped;
    if (n == 0) continue;  // interrupted
    auto done = static_cast<uint64_t>(n);
    const size_t from_head =
        static_cast<size_t>(std::min<uint64_t>(done, part.head.size() - head_sent_));
    head_sent_ += from_head;
    device_sent_ += done - from_head;
  }
  // The kernel has the bytes: the slab may take the next part.
  release_slab(part);
  part.head = std::vector<uint8_t>();
  awaiting_.push_back(std::move(part));
  sending_.pop_front();
  head_sent_ = 0;
  device_sent_ = 0;
  return WriteOutcome::kAllSent;
}

StreamSender::WriteOutcome StreamSender::write_some(bool inline_writer, std::vector<Ended>* ended) {
  iovec iov[kMaxIov];
  waiting_copy_ = false;
  // Only the stream's own thread talks to the device driver (it is bound to the device);
  // an inline writer never has a device part (enqueue()).
  if (!inline_writer) stage_device_parts();
  while (!sending_.empty()) {
    OutPart& part = sending_.front();
    if (part.src_device >= 0) {
      bool failed = false;
      if (!device_part_ready(part, &failed, ended)) {
        if (failed) {
          stage_device_parts();  // its slab is free again
          continue;
        }
        waiting_copy_ = true;
        return WriteOutcome::kWaitingCopy;
      }
      const WriteOutcome outcome = write_device_part(part, inline_writer, ended);
      if (outcome != WriteOutcome::kAllSent) return outcome;
      continue;
    }
    const PlannedPart& plan = part.post->plan.parts[part.part_index];
    const PartEntry* entries = part.post->plan.entries.data() + plan.first_entry;
    // A run of small entries goes out of the staging buffer as one piece (see
    // TcpOptions::stage_max_bytes); the rest are gathered straight from their sources.
    if (staged_end_ == 0 && entry_cursor_ < plan.entry_count && entry_offset_ == 0 &&
        is_staged(entries[entry_cursor_], options_.stage_max_bytes)) {
      stage_next_run(entries, plan.entry_count);
    }
    int n_iov = 0;
    if (head_sent_ < part.head.size()) {
      iov[n_iov++] = iovec{part.head.data() + head_sent_, part.head.size() - head_sent_};
    }
    const bool staged = staged_end_ != 0;
    if (staged) {
      iov[n_iov++] = iovec{stage_.data() + stage_sent_, stage_len_ - stage_sent_};
    } else {
      // Pieces that continue each other in source (but not in destination) share one
      // iovec: a head-split run is one iovec. A staged entry ends the list (it is next).
      for (uint32_t e = entry_cursor_; e < plan.entry_count && n_iov < kMaxIov; ++e) {
        const PartEntry& en = entries[e];
        if (e != entry_cursor_ && is_staged(en, options_.stage_max_bytes)) break;
        const uint64_t skip = (e == entry_cursor_) ? entry_offset_ : 0;
        if (en.pieces > 1 && en.src_stride == en.length) {
          // Source pieces that continue each other (a head-split run read from the
          // prefill's own pool): the rest of the run is one iovec, however many pieces.
          auto* base = reinterpret_cast<uint8_t*>(en.src_addr) + skip;
          const size_t len = en.bytes() - skip;
          if (n_iov > 0 &&
              static_cast<uint8_t*>(iov[n_iov - 1].iov_base) + iov[n_iov - 1].iov_len == base) {
            iov[n_iov - 1].iov_len += len;
          } else {
            iov[n_iov++] = iovec{base, len};
          }
          continue;
        }
        uint64_t within = skip % en.length;
        for (uint64_t k = skip / en.length; k < en.pieces && n_iov < kMaxIov; ++k, within = 0) {
          auto* base = reinterpret_cast<uint8_t*>(en.src_addr + k * en.src_stride) + within;
          const size_t len = en.length - within;
          if (n_iov > 0 &&
              static_cast<uint8_t*>(iov[n_iov - 1].iov_base) + iov[n_iov - 1].iov_len == base) {
            iov[n_iov - 1].iov_len += len;
          } else {
            iov[n_iov++] = iovec{base, len};
          }
        }
      }
    }
    WriteOutcome stopped = WriteOutcome::kAllSent;
    const ssize_t n = send_some(iov, n_iov, inline_writer, ended, &stopped);
    if (n < 0) return stopped;
    if (n == 0) continue;  // interrupted
    auto done = static_cast<uint64_t>(n);
    const size_t head_left = part.head.size() - head_sent_;
    const size_t from_head = static_cast<size_t>(std::min<uint64_t>(done, head_left));
    head_sent_ += from_head;
    done -= from_head;
    if (staged) {
      stage_sent_ += static_cast<size_t>(done);
      if (stage_sent_ == stage_len_) {
        entry_cursor_ = staged_end_;
        staged_end_ = 0;
      }
      done = 0;
    }
    advance_cursor(
        done, [&](uint32_t e) { return entries[e].bytes(); }, &entry_cursor_, &entry_offset_);
    if (head_sent_ == part.head.size() && entry_cursor_ == plan.entry_count) {
      part.head = std::vector<uint8_t>();  // the entry table is no longer needed
      awaiting_.push_back(std::move(part));
      sending_.pop_front();
      head_sent_ = 0;
      entry_cursor_ = 0;
      entry_offset_ = 0;
    }
  }
  return WriteOutcome::kAllSent;
}

bool StreamSender::finish_ack(const FrameHeader& header, std::span<const uint8_t> body,
                              std::vector<Ended>* ended) {
  if (awaiting_.empty() || awaiting_.front().part_id != header.part_id) {
    fail_all(data_loss("unexpected ACK for part " + std::to_string(header.part_id) + " from " +
                       endpoint_),
             ended);
    return false;
  }
  Result<AckBody> ack = decode_ack_body(body, header);
  if (!ack.ok()) {
    fail_all(ack.status(), ended);
    return false;
  }
  OutPart part = std::move(awaiting_.front());
  awaiting_.pop_front();
  const PlannedPart& plan = part.post->plan.parts[part.part_index];
  Status result;
  if (header.aux != 0) {
    const auto code = static_cast<StatusCode>(header.aux);
    if (code == StatusCode::kOutOfRange && ack->entry_index < plan.entry_count) {
      const PartEntry& e = part.post->plan.entries[plan.first_entry + ack->entry_index];
      const BlockName b = name_block(e, ack->bad_addr);
      const std::string which =
          b.first == b.last
              ? fmt::format("block {} (dst {:#x}, length {})", b.first, b.dst, b.length)
              : fmt::format("one of blocks {}-{} (merged into dst {:#x}, length {})", b.first,
                            b.last, b.dst, b.length);
      result = out_of_range(fmt::format(
          "{} is outside the registered memory of {} (first bad address {:#x}); peer: {}", which,
          endpoint_, ack->bad_addr, ack->message));
    } else {
      result = Status(code, "peer " + endpoint_ + ": " + ack->message);
    }
  } else if (header.payload_bytes != plan.bytes) {
    result = data_loss(fmt::format("peer {} acknowledged {} of {} bytes", endpoint_,
                                   header.payload_bytes, plan.bytes));
  }
  ended->push_back(Ended{std::move(part.post), std::move(result)});
  return true;
}

bool StreamSender::read_acks(std::vector<Ended>* ended) {
  while (true) {
    ssize_t n =
        ::recv(fd_.get(), ack_buf_.data() + ack_fill_, ack_buf_.size() - ack_fill_, MSG_DONTWAIT);
    if (n == 0) {
      fail_all(unavailable("peer " + endpoint_ + " closed the connection"), ended);
      return false;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      fail_all(unavailable("recv from " + endpoint_ + ": " + std::strerror(errno)), ended);
      return false;
    }
    ack_fill_ += static_cast<size_t>(n);
    size_t pos = 0;
    while (ack_fill_ - pos >= kHeaderSize) {
      Result<FrameHeader> h =
          decode_header(std::span<const uint8_t>(ack_buf_.data() + pos, kHeaderSize), 1);
      if (!h.ok() || h->type != FrameType::kAck) {
        fail_all(data_loss("malformed ACK from " + endpoint_ + ": " +
                           (h.ok() ? std::string("not an ACK") : h.status().to_string())),
                 ended);
        return false;
      }
      if (ack_fill_ - pos < kHeaderSize + h->count) break;  // body not complete yet
      if (!finish_ack(*h, std::span<const uint8_t>(ack_buf_.data() + pos + kHeaderSize, h->count),
                      ended)) {
        return false;
      }
      pos += kHeaderSize + h->count;
    }
    // ACK frames are < 1.1 KiB and the buffer 64 KiB, so a partial frame always fits.
    std::memmove(ack_buf_.data(), ack_buf_.data() + pos, ack_fill_ - pos);
    ack_fill_ -= pos;
  }
}

void StreamSender::run() {
  std::vector<Ended> ended;
  while (true) {
    {
      MutexLock lock(mu_);
      if (stop_) break;
    }
    pollfd p[2] = {{-1, 0, 0}, {wake_.fd(), POLLIN, 0}};
    int timeout = options_.io_timeout_ms;
    {
      MutexLock io(io_mu_);
      take_queued();
      if (!fd_.valid()) {
        // Broken: parts enqueued before broken_ was seen are failed here.
        fail_all(health(), &ended);
      } else if (!sending_.empty()) {
        const size_t before = sending_.size();
        const uint32_t cursor = entry_cursor_;
        const uint64_t offset = entry_offset_;
        const size_t head = head_sent_;
        const size_t staged = stage_sent_;
        const uint64_t device = device_sent_;
        (void)write_some(false, &ended);
        if (sending_.size() != before || cursor != entry_cursor_ || offset != entry_offset_ ||
            head != head_sent_ || staged != stage_sent_ || device != device_sent_) {
          last_progress_ = now();
        }
      }
      const bool outstanding = !sending_.empty() || !awaiting_.empty();
      if (!outstanding) last_progress_ = now();
      if (outstanding && fd_.valid()) {
        timeout =
            std::max<int>(0, options_.io_timeout_ms - static_cast<int>(elapsed_ms(last_progress_)));
      }
      // The driver's callback wakes us when the copies land, but a failed device stream
      // never calls it (CUDA skips host functions after an error): look again soon.
      if (waiting_copy_) timeout = std::min(timeout, kCopyErrorPollMs);
      // Idle, the thread still wakes every io_timeout_ms: an inline writer may have put
      // a part in flight without waking it, and its ACK must not be awaited forever.
      if (fd_.valid()) {
        // A part waiting for its device copies is woken by the driver, not by POLLOUT.
        const bool want_out = !sending_.empty() && !waiting_copy_;
        p[0] = {fd_.get(), static_cast<short>(POLLIN | (want_out ? POLLOUT : 0)), 0};
      }
    }
    complete(&ended);
    // Only this thread closes fd_, so the descriptor polled here stays open meanwhile.
    int n = ::poll(p, 2, timeout);
    if (n < 0 && errno != EINTR) {
      MutexLock io(io_mu_);
      fail_all(internal_error(std::string("poll: ") + std::strerror(errno)), &ended);
    }
    if (p[1].revents & POLLIN) wake_.drain();
    {
      MutexLock io(io_mu_);
      if (fd_.valid() && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
        const size_t waiting = awaiting_.size();
        if (read_acks(&ended) && awaiting_.size() != waiting) last_progress_ = now();
      }
      const bool outstanding = !sending_.empty() || !awaiting_.empty();
      if (fd_.valid() && outstanding && elapsed_ms(last_progress_) >= options_.io_timeout_ms) {
        fail_all(deadline_exceeded(fmt::format("no progress on the stream to {} for {} ms",
                                               endpoint_, options_.io_timeout_ms)),
                 &ended);
      }
    }
    complete(&ended);
  }
  // The rings' device work ends here, on the thread bound to their device: their
  // destructors wait for copies and callbacks still in flight (which signal wake_).
  MutexLock io(io_mu_);
  rings_.clear();
}

}  // namespace pdkv::engine::tcp
