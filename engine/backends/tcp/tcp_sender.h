// Sending side of the TCP backend: PostState (one post() to one peer) and StreamSender
// (one TCP connection to the peer, with its own thread).
//
// A StreamSender's thread owns the non-blocking socket. It gathers each part straight
// from source memory with sendmsg() over iovecs (header + entry table, then coalesced
// source runs, at most IOV_MAX per call, resumed after partial writes); runs of small
// entries are first copied into a staging buffer and sent as one piece
// (TcpOptions::stage_max_bytes). It reads the
// receiver's ACKs on the same socket; ACKs come back in part order. Many parts may be in
// flight per stream: nothing waits for an ACK before sending the next part.
//
// Device memory: a part that reads device memory (OutPart::src_device) is staged whole into
// one of the stream's pinned slabs (DeviceSlabRing, per device) before its header is sent:
// device-to-host copies on the ring's own device stream, an event, and a driver callback
// that wakes the thread. The thread stages parts ahead of the one it sends while slabs are
// free, so copies overlap sends, and sends a part only once its event fired (never a slab
// whose copy has not landed). A part whose copies fail ends with the driver's error before
// any byte of it is sent: the stream stays healthy and the other parts are unaffected.
// Such parts never go out inline.
//
// Failure: EOF or reset fails every queued and in-flight part at once (Unavailable); no
// progress in either direction for io_timeout_ms while work is outstanding fails them
// with DeadlineExceeded. The stream is then broken for good (health() reports why);
// later parts fail immediately. A malformed or unexpected ACK is DataLoss.
//
// Inline writes: a small part (TcpOptions::inline_write_max_bytes) enqueued while the
// stream has nothing being written goes out with one non-blocking sendmsg() from the
// caller's thread instead of waking the stream's thread: on 2 shared cores that hand-over
// cost a P5 request ~60-100 us of its ~250 (BENCHMARKS.md, P5). What the write leaves
// (a full socket buffer, an error) is the thread's, woken then; the thread keeps reading
// ACKs (it always polls the socket for input) and watching progress (an idle thread still
// wakes every io_timeout_ms, so an inline part whose ACK never comes fails in time).
//
// Thread safety: enqueue() and health() may be called from any thread. The connection's
// send and ACK state is guarded by io_mu_, held by the thread while it works (never across
// poll()) and by an inline writer (try_lock only: a busy stream is simply woken). Parts
// are completed (PostState::part_done, which runs the sink's callbacks) outside io_mu_, so
// a callback may enqueue again. The destructor stops and joins the thread and completes
// whatever is left with Aborted.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "engine/backend.h"
#include "engine/backends/tcp/device_copies.h"
#include "engine/backends/tcp/device_slab_ring.h"
#include "engine/backends/tcp/part_planner.h"
#include "engine/backends/tcp/socket_util.h"
#include "engine/backends/tcp/stage_buffer.h"
#include "engine/backends/tcp/tcp_frame.h"
#include "engine/device/ready_event.h"

namespace pdkv::engine::tcp {

// Shared by the streams that carry a post's parts: the last part to finish reports the
// post's result (its first error, else OK) to the sink.
struct PostState {
  uint64_t token = 0;
  CompletionSink* sink = nullptr;
  PartPlan plan;  // its entries name the caller's blocks (a copy of the list is not kept)
  // Device sources are copied only after these events (empty: none), waited for on the
  // device by each part's staging copies.
  ReadyEvents ready;
  std::atomic<size_t> parts_left{0};
  Mutex error_mu;
  Status first_error PDKV_GUARDED_BY(error_mu);

  void part_done(const Status& status);
};

struct OutPart {
  std::shared_ptr<PostState> post;
  uint32_t part_index = 0;    // into post->plan.parts
  std::vector<uint8_t> head;  // encoded header + entry table
  uint64_t part_id = 0;       // assigned by the stream
  int src_device = -1;        // reads device memory of this device: staged (see below)
  int slab = -1;              // its slab in the stream's ring for src_device, once staged
  Status stage_error;         // the copies could not be issued: the part fails unsent
};

class StreamSender {
 public:
  // Connects, says HELLO and waits for HELLO_ACK, then starts the thread.
  static Result<std::unique_ptr<StreamSender>> connect(const std::string& endpoint,
                                                       uint32_t stream_index,
                                                       const EngineOptions& options);
  ~StreamSender();
  StreamSender(const StreamSender&) = delete;
  StreamSender& operator=(const StreamSender&) = delete;

  void enqueue(OutPart part);
  Status health() const;

 private:
  StreamSender(UniqueFd fd, std::string endpoint, const TcpOptions& options);
  // A part that ended (ACKed, or failed) and the status to complete it with, once io_mu_
  // is released.
  struct Ended {
    std::shared_ptr<PostState> post;
    Status status;
  };
  enum class WriteOutcome : uint8_t {
    kAllSent,      // sending_ is empty
    kBlocked,      // the socket buffer is full: wait for POLLOUT
    kBroken,       // the socket failed (fail_all was called, unless the writer was inline)
    kWaitingCopy,  // the front part's device copies have not landed: the driver wakes us
  };

  void run();
  // Writes from the front of sending_ until it is empty or the socket would block. An
  // inline writer does not fail the stream on a socket error: it leaves that to the
  // thread, which meets the same error on its next write.
  WriteOutcome write_some(bool inline_writer, std::vector<Ended>* ended) PDKV_REQUIRES(io_mu_);
  // Copies the run of small entries at entry_cursor_ into stage_.
  void stage_next_run(const PartEntry* entries, uint32_t entry_count) PDKV_REQUIRES(io_mu_);
  // Issues the device copies of queued device parts into free slabs, in order.
  void stage_device_parts() PDKV_REQUIRES(io_mu_);
  Status stage_into_slab(OutPart& part, DeviceSlabRing& ring) PDKV_REQUIRES(io_mu_);
  // The ring for `device`, created (on this thread) if needed.
  Result<DeviceSlabRing*> ring_for(int device) PDKV_REQUIRES(io_mu_);
  // After the front part's copies failed: the parts staged behind it on that device's
  // stream go back to unstaged.
  void unstage_after_failed_copy(int device) PDKV_REQUIRES(io_mu_);
  // Whether the front (device) part's slab is ready to send; ends the part if its copies
  // failed (then returns false with *failed set).
  bool device_part_ready(OutPart& part, bool* failed, std::vector<Ended>* ended)
      PDKV_REQUIRES(io_mu_);
  void release_slab(OutPart& part) PDKV_REQUIRES(io_mu_);
  // One non-blocking sendmsg: the bytes the socket took (0: interrupted, try again), or
  // -1 with *stopped kBlocked (full) or kBroken (failed; fail_all called unless inline).
  ssize_t send_some(iovec* iov, int n_iov, bool inline_writer, std::vector<Ended>* ended,
                    WriteOutcome* stopped) PDKV_REQUIRES(io_mu_);
  // Sends the front part's header and staged slab; kAllSent once all of it went out.
  WriteOutcome write_device_part(OutPart& part, bool inline_writer, std::vector<Ended>* ended)
      PDKV_REQUIRES(io_mu_);
  // Each returns false once the stream broke (fail_all was called).
  bool read_acks(std::vector<Ended>* ended) PDKV_REQUIRES(io_mu_);
  bool finish_ack(const FrameHeader& header, std::span<const uint8_t> body,
                  std::vector<Ended>* ended) PDKV_REQUIRES(io_mu_);
  void fail_all(const Status& status, std::vector<Ended>* ended) PDKV_REQUIRES(io_mu_);
  void take_queued() PDKV_REQUIRES(io_mu_);
  // From enqueue(): true if the caller's thread wrote every queued part (see the header).
  bool write_inline();
  // Header, entry table and payload of a part.
  static uint64_t wire_bytes(const OutPart& part);
  static void complete(std::vector<Ended>* ended);

  const std::string endpoint_;
  const TcpOptions options_;
  EventFd wake_;
  std::thread thread_;

  mutable Mutex mu_;
  std::deque<OutPart> queued_ PDKV_GUARDED_BY(mu_);
  Status broken_ PDKV_GUARDED_BY(mu_);
  bool stop_ PDKV_GUARDED_BY(mu_) = false;

  // The connection's state: the thread's, or an inline writer's while it holds io_mu_.
  // Lock order: io_mu_ before mu_.
  Mutex io_mu_;
  UniqueFd fd_ PDKV_GUARDED_BY(io_mu_);                   // reset (closed) only by the thread
  std::deque<OutPart> sending_ PDKV_GUARDED_BY(io_mu_);   // front is being written
  std::deque<OutPart> awaiting_ PDKV_GUARDED_BY(io_mu_);  // fully written, ACK pending, in order
  size_t head_sent_ PDKV_GUARDED_BY(io_mu_) = 0;
  uint32_t entry_cursor_ PDKV_GUARDED_BY(io_mu_) = 0;  // within the front part's entries
  uint64_t entry_offset_ PDKV_GUARDED_BY(io_mu_) = 0;  // bytes of that entry already sent
  // Staged run of small entries [entry_cursor_, staged_end_) of the front part; 0 = none.
  StageBuffer stage_ PDKV_GUARDED_BY(io_mu_);
  uint32_t staged_end_ PDKV_GUARDED_BY(io_mu_) = 0;
  size_t stage_len_ PDKV_GUARDED_BY(io_mu_) = 0;
  size_t stage_sent_ PDKV_GUARDED_BY(io_mu_) = 0;
  uint64_t next_part_id_ PDKV_GUARDED_BY(io_mu_) = 1;
  // Device staging: rings by device ordinal (created on first use), payload bytes of the
  // front device part already sent, and whether the thread waits for a copy to land.
  std::vector<std::unique_ptr<DeviceSlabRing>> rings_ PDKV_GUARDED_BY(io_mu_);
  uint64_t device_sent_ PDKV_GUARDED_BY(io_mu_) = 0;
  // Device parts in sending_ that have neither a slab nor a staging error yet.
  size_t unstaged_device_parts_ PDKV_GUARDED_BY(io_mu_) = 0;
  // The runs of the part being staged (stage_into_slab), kept to reuse their storage.
  std::vector<PayloadRun> stage_runs_ PDKV_GUARDED_BY(io_mu_);
  bool waiting_copy_ PDKV_GUARDED_BY(io_mu_) = false;
  std::vector<uint8_t> ack_buf_ PDKV_GUARDED_BY(io_mu_);
  size_t ack_fill_ PDKV_GUARDED_BY(io_mu_) = 0;
  // Last byte sent or ACK received while work was outstanding (the stall watch).
  TimePoint last_progress_ PDKV_GUARDED_BY(io_mu_);
};

}  // namespace pdkv::engine::tcp
