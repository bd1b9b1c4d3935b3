// FdChannel: records with file descriptors attached, over a Unix-domain SOCK_SEQPACKET
// socket in the abstract namespace: how device memory handles reach another process of
// this host (a POSIX-fd handle of the virtual-memory API is a file descriptor, and only
// the kernel can hand one to another process: SCM_RIGHTS).
//
// The abstract namespace has no file to clean up after a crash, and belongs to the
// network namespace: a peer in another one cannot connect, which is right (the lease
// handshake already refused it as another host). Anyone on the host may connect, so the
// server serves only a caller that presents a session token the authenticated lease
// channel gave it (cuda_ipc_backend.cc).
//
// Thread safety: a channel is used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace pdkv::engine::cuda_ipc {

// Largest record (a handle table entry is ~110 bytes) and most descriptors per record.
inline constexpr size_t kMaxRecordBytes = 4096;

class FdChannel {
 public:
  FdChannel() = default;
  explicit FdChannel(UniqueFd fd) : fd_(std::move(fd)) {}

  // Connects to the abstract socket `name` (without its leading NUL).
  static Result<FdChannel> connect(const std::string& name, int timeout_ms);

  // One record, with `fd` attached when >= 0.
  Status send(std::span<const uint8_t> record, int fd = -1);
  // One record into *record; an attached descriptor into *fd (at most one is accepted:
  // any more are closed and the record refused). DeadlineExceeded after the timeout set
  // by set_timeout, Unavailable on EOF.
  Status receive(std::vector<uint8_t>* record, UniqueFd* fd);
  Status set_timeout(int timeout_ms);
  int get() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

// The listening side: binds a fresh abstract name ("pdkv-cuda-ipc-<pid>-<random>").
class FdListener {
 public:
  static Result<FdListener> listen();
  const std::string& name() const { return name_; }
  // Waits at most timeout_ms for a connection; an invalid channel when none came.
  Result<FdChannel> accept(int timeout_ms);
  void shutdown();

 private:
  UniqueFd fd_;
  std::string name_;
};

// `n` bytes from the kernel's random source (session tokens).
Status random_bytes(std::span<uint8_t> out);

}  // namespace pdkv::engine::cuda_ipc
