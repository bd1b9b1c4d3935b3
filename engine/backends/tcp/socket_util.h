// Socket helpers of the TCP backend: listen/connect with timeouts (endpoints parsed by
// common/host_port.h), socket tuning, and full reads/writes on non-blocking sockets that
// handle partial transfers, EINTR and EAGAIN, wake up on a stop eventfd and give up after
// a period without progress.
//
// Thread safety: free functions.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/engine_options.h"

namespace pdkv::engine::tcp {

// The owner of a descriptor (common/unique_fd.h), by the name this backend's users know.
using UniqueFd = pdkv::UniqueFd;

// A level-triggered wake-up: signal() makes `fd()` readable until drain().
class EventFd {
 public:
  EventFd();
  int fd() const { return fd_.get(); }
  void signal() const;
  void drain() const;

 private:
  UniqueFd fd_;
};

// Non-blocking listening socket; port 0 = ephemeral. *bound_port gets the real port.
Result<UniqueFd> listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port);
// Non-blocking connected socket to "host:port" / "[v6]:port"; InvalidArgument for a
// malformed endpoint (parse_host_port), else Unavailable naming the endpoint and the cause.
Result<UniqueFd> connect_tcp(const std::string& endpoint, int timeout_ms);
// TCP_NODELAY (acks are tiny and must not wait for Nagle) and optional buffer sizes.
void tune_socket(int fd, const TcpOptions& options);

// Waits for `events` on fd (or the stop fd). Returns OK when ready, Aborted when stop
// fired, DeadlineExceeded after timeout_ms (-1 = forever).
Status wait_fd(int fd, short events, int stop_fd, int timeout_ms);

// What a read asks before each wait for more bytes (and every kReadCheckSliceMs while it
// waits): a non-OK answer ends the read with it. A plain function and its context, so a
// read on the hot path allocates nothing; empty (fn null) = no check.
struct ReadCheck {
  Status (*fn)(const void* context) = nullptr;
  const void* context = nullptr;
  explicit operator bool() const { return fn != nullptr; }
  Status operator()() const { return fn(context); }
};
inline constexpr int kReadCheckSliceMs = 100;

// Writes all `len` bytes. Fails with DeadlineExceeded if no byte moves for timeout_ms,
// Unavailable if the peer closed or reset, Aborted if stop fired.
Status write_full(int fd, const void* data, size_t len, int stop_fd, int timeout_ms);
// Reads exactly `len` bytes. `first_byte_timeout_ms` (-1 = forever) applies until the
// first byte arrives (an idle connection is fine), `timeout_ms` to every later stall.
// Unavailable on EOF (message says whether it was mid-frame).
Status read_full(int fd, void* data, size_t len, int stop_fd, int first_byte_timeout_ms,
                 int timeout_ms, ReadCheck check = {});
// Fills the iovecs exactly (they are consumed in place: partial reads advance them).
Status readv_full(int fd, struct iovec* iov, int iov_count, int stop_fd, int timeout_ms,
                  ReadCheck check = {});

}  // namespace pdkv::engine::tcp
