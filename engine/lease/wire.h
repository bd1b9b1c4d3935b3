// Control channel of the shm and UCX backends: a TCP connection to the peer engine's
// endpoint carrying small framed messages. Bytes never travel here (CMA or UCX moves
// them); the channel carries the handshake, write leases and their release. With a
// cluster secret every connection starts with the session handshake (lease_auth.h:
// kAuthHello, kAuthChallenge, kAuthProof) before kHello.
//
// Frame: u8 version (kWireVersion), u8 type (MsgType), u16 zero, u32 payload_bytes,
// then the payload; every integer little-endian, fixed width, encoded field by field
// (never a struct copy). A frame whose declared payload exceeds kMaxPayloadBytes, or
// whose version/type/zero field is wrong, is DataLoss before anything is allocated.
// The payloads of each type are encoded and decoded by messages.h; decode_frame_header
// and the message decoders are pure so that lease_wire_fuzzer.cc can reach them.
//
// Socket helpers use non-blocking fds and poll() so every call has a deadline; none of
// them raises SIGPIPE (MSG_NOSIGNAL).
//
// Thread safety: free functions; a Socket may be written by one thread while another
// reads it, but two concurrent readers (or writers) need outside locking.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace pdkv::engine::lease {

// 2: lease ranges carry a write grant; 3: the session handshake (kAuth*) and kAuthRefused;
// 4: the path channel's kPathHello and kPathChoice (engine/path/path_channel.h)
inline constexpr uint8_t kWireVersion = 4;
inline constexpr uint32_t kFrameHeaderBytes = 8;
inline constexpr uint32_t kMaxPayloadBytes = 64u << 20;
// What a receiver reads from a peer before it authenticated (the handshake's messages and
// kHello are a few dozen bytes): a stranger cannot make it allocate kMaxPayloadBytes.
inline constexpr uint32_t kMaxHandshakePayloadBytes = 4096;

enum class MsgType : uint8_t {
  kHello = 1,           // sender -> receiver: backend name, host identity, backend extra
  kHelloAck = 2,        // receiver -> sender: status, pid, host identity, backend extra
  kLease = 3,           // u64 part_id, u32 count, count x (u64 dst, u64 length)
  kGrant = 4,           // u64 part_id, u8 ok, u32 bad_index, u64 first_bad, u64 epoch, str msg
  kDone = 5,            // u64 part_id
  kDoneAck = 6,         // u64 part_id
  kRegionsReq = 7,      // (UCX) ask for the region table with packed rkeys
  kRegions = 8,         // (UCX) u64 epoch, u32 n, n x (u64 addr, u64 len, bytes rkey)
  kAuthHello = 9,       // sender -> receiver: its nonce (lease_auth.h)
  kAuthChallenge = 10,  // receiver -> sender: its nonce and its proof
  kAuthProof = 11,      // sender -> receiver: the sender's proof
  kAuthRefused = 12,    // either way, then the connection closes: str why
  kPathHello = 13,      // path channel, both ways: locality, proof slot, offers
  kPathChoice = 14,     // path channel, sender -> receiver: the path it took and why
};
inline constexpr uint8_t kMaxMsgType = 14;

struct FrameHeader {
  MsgType type = MsgType::kHello;
  uint32_t payload_bytes = 0;
};

// Writes exactly kFrameHeaderBytes to `out`.
void encode_frame_header(MsgType type, uint32_t payload_bytes, uint8_t* out);
// DataLoss on fewer than kFrameHeaderBytes, or a bad version, type, zero field or
// payload size (> kMaxPayloadBytes). Reads only the first kFrameHeaderBytes.
Result<FrameHeader> decode_frame_header(std::span<const uint8_t> bytes);

// Appends little-endian fields to a byte buffer.
class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v);
  void u64(uint64_t v);
  void bytes(std::string_view s);  // u32 length + bytes

 private:
  template <class T>
  void fixed(T v);

  std::vector<uint8_t>& out_;
};

// Consumes little-endian fields from a span; each getter fails (DataLoss) on short input.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  Status u8(uint8_t* v);
  Status u32(uint32_t* v);
  Status u64(uint64_t* v);
  Status bytes(std::string* v);
  size_t remaining() const { return in_.size() - pos_; }

 private:
  template <class T>
  Status fixed(T* v, const char* truncated);

  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

// Owns a connected, non-blocking TCP socket fd (closed by the destructor).
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}

  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  int release() { return fd_.release(); }
  // shutdown(SHUT_RDWR): wakes a thread blocked in poll on this socket (used to stop).
  void shutdown_both();

  // Sends one frame (header + payload) before `deadline`.
  Status send_frame(MsgType type, std::span<const uint8_t> payload, TimePoint deadline);
  // Receives one frame; Unavailable on EOF/reset, DeadlineExceeded on timeout, DataLoss
  // on a malformed header or a payload above `max_payload_bytes` (checked before anything
  // is allocated: a peer not yet authenticated gets kMaxHandshakePayloadBytes). `payload`
  // is reused (no allocation once it is large enough).
  Status recv_frame(MsgType* type, std::vector<uint8_t>* payload, TimePoint deadline,
                    uint32_t max_payload_bytes = kMaxPayloadBytes);

 private:
  Status write_all(const uint8_t* p, size_t n, TimePoint deadline);
  Status read_all(uint8_t* p, size_t n, TimePoint deadline);
  UniqueFd fd_;
};

// Connects to "host:port" (IPv4) within `timeout_ms`. InvalidArgument for a malformed
// endpoint (common/host_port.h); Unavailable naming the endpoint and errno text.
Result<Socket> connect_to(const std::string& endpoint, int timeout_ms);
// TCP_NODELAY: the channel is request/response of small frames.
void set_nodelay(int fd);
// Binds and listens on host:port (port 0 = ephemeral); returns the fd and the bound port.
Result<Socket> listen_on(const std::string& host, int port, int* bound_port);

// An id for "same kernel, same pid namespace": boot_id + pid-namespace inode. CMA and
// UCX shared-memory transports only work between engines with equal identities.
std::string host_identity();

}  // namespace pdkv::engine::lease
