// Raw HTTP/1.1 over a loopback TCP socket, for tests that must send what no well-behaved
// client sends (chunked floods, thousands of headers, a byte a second) and see exactly
// how the server reacts: a status, a closed connection, or silence.
//
// Thread safety: a RawConnection belongs to one thread at a time.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "common/clock.h"

namespace pdkv::http::testing {

// One chunk of a chunked body: its size line, then n bytes of 'x'.
inline std::string body_chunk(size_t n) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", n);
  return size + std::string(n, 'x') + "\r\n";
}

struct RawReply {
  // The HTTP status; 0 if the server closed (or reset) the connection before a whole
  // reply came; -1 if nothing conclusive came within the timeout.
  int status = -1;
  std::string body;
};

class RawConnection {
 public:
  // Connects to 127.0.0.1:port, from source address `from` if given (any 127.x.y.z is
  // this host, so a test can play several clients). !ok() if the connection failed.
  explicit RawConnection(int port, const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (from != nullptr) {
      ::inet_pton(AF_INET, from, &addr.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close();
        return;
      }
    }
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close();
      return;
    }
    timeval tv{5, 0};  // no send blocks a test forever
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  ~RawConnection() { close(); }
  RawConnection(RawConnection&& o) noexcept : fd_(o.fd_), buffered_(std::move(o.buffered_)) {
    o.fd_ = -1;
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // False once the server has closed or reset the connection (or a send timed out).
  bool send_all(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // A chunked body's flood: chunks of `chunk_bytes` until `up_to` bytes went or a send
  // failed (the server cut the connection). Returns the bytes sent.
  size_t send_chunks(size_t chunk_bytes, size_t up_to) {
    const std::string piece = body_chunk(chunk_bytes);
    size_t sent = 0;
    while (sent < up_to && send_all(piece)) sent += chunk_bytes;
    return sent;
  }

  // Reads one reply (headers, then a Content-Length body).
  RawReply read_reply(std::chrono::milliseconds timeout) {
    TimePoint deadline = now() + timeout;
    RawReply reply;
    for (;;) {
      size_t end = buffered_.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t length = content_length(buffered_.substr(0, end));
        if (buffered_.size() >= end + 4 + length) {
          reply.status = std::atoi(buffered_.c_str() + buffered_.find(' ') + 1);
          reply.body = buffered_.substr(end + 4, length);
          buffered_.erase(0, end + 4 + length);
          return reply;
        }
      }
      int got = receive(deadline);
      if (got == 0) return RawReply{0, {}};
      if (got < 0) return reply;  // timed out
    }
  }

  // True if the server closes (or resets) the connection within `timeout`; whatever it
  // sends before is read and dropped.
  bool closed_within(std::chrono::milliseconds timeout) {
    TimePoint deadline = now() + timeout;
    for (;;) {
      int got = receive(deadline);
      if (got == 0) return true;
      if (got < 0) return false;
      buffered_.clear();
    }
  }

 private:
  static size_t content_length(const std::string& head) {
    for (const char* name : {"\r\nContent-Length:", "\r\ncontent-length:"}) {
      size_t at = head.find(name);
      if (at != std::string::npos) return std::stoul(head.substr(at + std::string(name).size()));
    }
    return 0;
  }

  // 1: read some bytes into buffered_; 0: the peer closed or reset; -1: timed out.
  int receive(TimePoint deadline) {
    int64_t left = std::chrono::duration_cast<Millis>(deadline - now()).count();
    if (left <= 0) return -1;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return -1;
    char buf[16384];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return 0;
    buffered_.append(buf, static_cast<size_t>(n));
    return 1;
  }

  int fd_ = -1;
  std::string buffered_;
};

inline std::string get_request(std::string_view path) {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: test\r\n\r\n";
}

// One GET on a fresh connection.
inline RawReply raw_get(int port, std::string_view path, std::chrono::milliseconds timeout,
                        const char* from = nullptr) {
  RawConnection c(port, from);
  if (!c.ok() || !c.send_all(get_request(path))) return RawReply{0, {}};
  return c.read_reply(timeout);
}

}  // namespace pdkv::http::testing
