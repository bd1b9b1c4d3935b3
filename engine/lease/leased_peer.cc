#include "engine/lease/leased_peer.h"

#include <algorithm>

#include "common/logging.h"

namespace pdkv::engine::lease {

LeasedPeer::LeasedPeer(std::string endpoint, CompletionSink* sink, LeasedPeerOptions options)
    : endpoint_(std::move(endpoint)), sink_(sink), options_(options) {}

LeasedPeer::~LeasedPeer() { stop(); }

Status LeasedPeer::health() const {
  MutexLock lock(mu_);
  return broken_;
}

void LeasedPeer::start(std::unique_ptr<LeaseClient> client) {
  client_ = std::move(client);
  thread_ = std::thread([this] { run(); });
}

void LeasedPeer::stop() {
  {
    MutexLock lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (client_) client_->shutdown();  // wakes a thread blocked on the socket
  if (thread_.joinable()) thread_.join();
  std::deque<Post> left;
  {
    MutexLock lock(mu_);
    left.swap(queue_);
  }
  for (auto& p : left) sink_->on_complete(p.token, aborted("session to " + endpoint_ + " closed"));
}

void LeasedPeer::set_broken(const Status& status) {
  MutexLock lock(mu_);
  if (broken_.ok()) broken_ = status;
}

Status LeasedPeer::post(std::span<const WriteBlock> blocks, uint64_t token) {
  MutexLock lock(mu_);
  if (!broken_.ok()) return broken_;
  if (stopping_) return aborted("session to " + endpoint_ + " is closing");
  queue_.push_back(Post{std::vector<WriteBlock>(blocks.begin(), blocks.end()), token});
  cv_.notify_one();
  return Status();
}

void LeasedPeer::run() {
  for (;;) {
    Post post;
    Status broken;
    {
      MutexLock lock(mu_);
      cv_.wait_until(mu_, now() + Millis(1000),
                     [this]() PDKV_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      if (queue_.empty()) continue;
      post = std::move(queue_.front());
      queue_.pop_front();
      broken = broken_;
    }
    Status st = broken.ok() ? run_post(post) : broken;
    bool stopping = false;
    {
      MutexLock lock(mu_);
      stopping = stopping_;
    }
    if (stopping && !st.ok()) st = aborted("session to " + endpoint_ + " closed");
    sink_->on_complete(post.token, std::move(st));
  }
}

Status LeasedPeer::run_post(const Post& post) {
  // Cut blocks into pieces no larger than a part, then group pieces into parts.
  pieces_.clear();
  size_t want = post.blocks.size();
  for (const auto& b : post.blocks) want += b.length / options_.part_bytes;
  pieces_.reserve(want);
  for (size_t i = 0; i < post.blocks.size(); ++i) {
    const auto& b = post.blocks[i];
    for (uint64_t off = 0; off < b.length; off += options_.part_bytes) {
      uint64_t len = std::min<uint64_t>(options_.part_bytes, b.length - off);
      pieces_.push_back(
          Piece{b.src_addr + off, b.dst_addr + off, len, static_cast<uint32_t>(i), b.grant});
    }
  }
  size_t begin = 0;
  while (begin < pieces_.size()) {
    size_t end = begin;
    uint64_t bytes = 0;
    while (end < pieces_.size() && end - begin < options_.part_entries &&
           (end == begin || bytes + pieces_[end].length <= options_.part_bytes)) {
      bytes += pieces_[end].length;
      ++end;
    }
    PDKV_RETURN_IF_ERROR(
        run_part(std::span<const Piece>(pieces_).subspan(begin, end - begin), next_part_id_++));
    begin = end;
  }
  return Status();
}

Status LeasedPeer::run_part(std::span<const Piece> pieces, uint64_t part_id) {
  ranges_.clear();
  ranges_.reserve(pieces.size() * 3);
  for (const auto& p : pieces) {
    ranges_.push_back(p.dst_addr);
    ranges_.push_back(p.length);
    ranges_.push_back(p.grant);
  }
  // Our lease clock starts before the request leaves, so it ends before the receiver's.
  auto lease_deadline = now() + Millis(client_->hello().lease_ms);
  auto io_deadline = now() + Millis(options_.io_timeout_ms);
  auto grant = client_->lease(part_id, ranges_, io_deadline);
  if (!grant.ok()) {
    set_broken(grant.status().with_context(endpoint_));
    return grant.status().with_context(endpoint_);
  }
  if (!grant->ok) {
    const Piece& bad = pieces[std::min<size_t>(grant->bad_index, pieces.size() - 1)];
    return out_of_range("block " + std::to_string(bad.index) + " (dst " +
                        std::to_string(bad.dst_addr) + ", length " + std::to_string(bad.length) +
                        ") rejected by " + endpoint_ + ": " + grant->message);
  }
  Status written = write_part(pieces, *grant, lease_deadline);
  // Release the lease even after a failed write, so the receiver's unregister need not
  // wait for the lease to run out.
  Status released = client_->done(part_id, now() + Millis(options_.io_timeout_ms));
  if (!released.ok()) set_broken(released.with_context(endpoint_));
  if (!written.ok()) {
    if (written.code() == StatusCode::kUnavailable) set_broken(written);
    return written;
  }
  return released.with_context(endpoint_);
}

}  // namespace pdkv::engine::lease
