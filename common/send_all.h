// The one loop that sends a whole buffer on a non-blocking socket: partial sends resume
// where they stopped, EINTR retries, a full socket (EAGAIN) waits. How to wait (a
// deadline, a stop fd) and how a failure reads are the caller's.
#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace pdkv {

// Sends all `len` bytes (MSG_NOSIGNAL: a closed peer is an error, never SIGPIPE).
// `wait_writable()` runs whenever the socket is full; its error ends the loop. Any other
// send failure ends it with `send_failed(errno)`.
template <class WaitWritable, class SendFailed>
Status send_all(int fd, const void* data, size_t len, const WaitWritable& wait_writable,
                const SendFailed& send_failed) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    const ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      PDKV_RETURN_IF_ERROR(wait_writable());
      continue;
    }
    return send_failed(errno);
  }
  return Status();
}

}  // namespace pdkv
