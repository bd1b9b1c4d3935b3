// LeasedPeer: a BackendPeer whose writes are one-sided (CMA, UCX put) and therefore run
// under leases granted by the receiver (lease_server.h). Shared by the shm and UCX
// backends; the subclass supplies write_part(), the one thing that differs.
//
// A post is cut into parts of at most part_bytes and part_entries (a block larger than
// part_bytes is cut into pieces), and every part goes: lease -> write_part -> done. A
// refused lease fails the post with OutOfRange naming the block's index in the post, its
// dst and length, before a byte of that part is written (earlier parts of the same post
// may have been written: their ranges were validated, which is all the engine promises).
//
// Threads: owns one sender thread that runs posts in order (posts to one peer are
// serialised; the engine spreads load over sessions). It blocks on the control socket
// (bounded by io_timeout_ms) and inside write_part (bounded by the lease).
// Thread safety: post() and health() from any thread. A subclass must call stop() first
// in its destructor, so the thread never runs write_part() on a half-destroyed object.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "engine/backend.h"
#include "engine/lease/lease_client.h"

namespace pdkv::engine::lease {

struct LeasedPeerOptions {
  uint64_t part_bytes = 64ull << 20;
  uint32_t part_entries = 1u << 16;
  int io_timeout_ms = 5000;
};

// One contiguous write of a part; `index` is the block's index in the posted list.
struct Piece {
  uint64_t src_addr;
  uint64_t dst_addr;
  uint64_t length;
  uint32_t index;
  uint64_t grant;  // the receiver's write grant (write_grant.h), 0 = none
};

class LeasedPeer : public BackendPeer {
 public:
  LeasedPeer(std::string endpoint, CompletionSink* sink, LeasedPeerOptions options);
  ~LeasedPeer() override;

  const std::string& endpoint() const override { return endpoint_; }
  Status health() const override;

  // Starts the sender thread over a connected client.
  void start(std::unique_ptr<LeaseClient> client);
  Status post(std::span<const WriteBlock> blocks, uint64_t token);

 protected:
  // Writes every piece before `lease_deadline` (start no syscall after it).
  virtual Status write_part(std::span<const Piece> pieces, const Grant& grant,
                            TimePoint lease_deadline) = 0;
  // Stops and joins the thread; in-flight and queued posts complete with Aborted.
  void stop();
  LeaseClient& client() { return *client_; }
  const LeasedPeerOptions& options() const { return options_; }

 private:
  struct Post {
    std::vector<WriteBlock> blocks;
    uint64_t token;
  };
  void run();
  Status run_post(const Post& post);
  Status run_part(std::span<const Piece> pieces, uint64_t part_id);
  void set_broken(const Status& status);

  const std::string endpoint_;
  CompletionSink* const sink_;
  const LeasedPeerOptions options_;
  std::unique_ptr<LeaseClient> client_;  // used only by the sender thread after start()
  std::thread thread_;
  uint64_t next_part_id_ = 1;  // sender thread only
  std::vector<Piece> pieces_;  // sender thread only; reused across posts
  std::vector<uint64_t> ranges_;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Post> queue_ PDKV_GUARDED_BY(mu_);
  Status broken_ PDKV_GUARDED_BY(mu_);
  bool stopping_ PDKV_GUARDED_BY(mu_) = false;
};

}  // namespace pdkv::engine::lease
