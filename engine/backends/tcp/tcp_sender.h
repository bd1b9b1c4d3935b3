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
// Failure: EOF or reset fails every queued and in-flight part at once (Unavailable); no
// progress in either direction for io_timeout_ms while work is outstanding fails them
// with DeadlineExceeded. The stream is then broken for good (health() reports why);
// later parts fail immediately. A malformed or unexpected ACK is DataLoss.
//
// Thread safety: enqueue() and health() may be called from any thread. The destructor
// stops and joins the thread and completes whatever is left with Aborted.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/backend.h"
#include "engine/backends/tcp/part_planner.h"
#include "engine/backends/tcp/socket_util.h"
#include "engine/backends/tcp/stage_buffer.h"
#include "engine/backends/tcp/tcp_frame.h"

namespace pdkv::engine::tcp {

// Shared by the streams that carry a post's parts: the last part to finish reports the
// post's result (its first error, else OK) to the sink.
struct PostState {
  uint64_t token = 0;
  CompletionSink* sink = nullptr;
  std::vector<WriteBlock> blocks;  // the caller's list, for naming a rejected block
  PartPlan plan;
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
  void run();
  // Each returns false once the stream broke (fail_all was called).
  bool write_some();
  // Copies the run of small entries at entry_cursor_ into stage_.
  void stage_next_run(const PartEntry* entries, uint32_t entry_count);
  bool read_acks();
  bool finish_ack(const FrameHeader& header, std::span<const uint8_t> body);
  void fail_all(const Status& status);
  void take_queued();

  const std::string endpoint_;
  const TcpOptions options_;
  UniqueFd fd_;  // used by the thread only
  EventFd wake_;
  std::thread thread_;

  mutable Mutex mu_;
  std::deque<OutPart> queued_ PDKV_GUARDED_BY(mu_);
  Status broken_ PDKV_GUARDED_BY(mu_);
  bool stop_ PDKV_GUARDED_BY(mu_) = false;

  // Thread-only state.
  std::deque<OutPart> sending_;   // front is being written
  std::deque<OutPart> awaiting_;  // fully written, ACK pending, in order
  size_t head_sent_ = 0;
  uint32_t entry_cursor_ = 0;  // within the front part's entries
  uint64_t entry_offset_ = 0;  // bytes of that entry already sent
  // Staged run of small entries [entry_cursor_, staged_end_) of the front part; 0 = none.
  StageBuffer stage_;
  uint32_t staged_end_ = 0;
  size_t stage_len_ = 0;
  size_t stage_sent_ = 0;
  uint64_t next_part_id_ = 1;
  std::vector<uint8_t> ack_buf_;
  size_t ack_fill_ = 0;
};

}  // namespace pdkv::engine::tcp
