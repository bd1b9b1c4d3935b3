// A file descriptor with one owner: closed when the owner goes, handed on by move.
// set_nonblocking beside it: every socket pdkv polls on is made non-blocking first.
//
// Thread safety: a UniqueFd is owned by one object; the descriptor it holds may be used
// from several threads as the kernel allows.
#pragma once

#include "common/status.h"

namespace pdkv {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  // The descriptor, no longer owned (-1 is left behind).
  int release();
  // Closes the descriptor, if any.
  void reset();
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// O_NONBLOCK on `fd`; Internal with the errno text if fcntl fails.
Status set_nonblocking(int fd);

}  // namespace pdkv
