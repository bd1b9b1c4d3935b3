// Receiving side of the TCP backend: accepts connections and applies incoming parts.
//
// Threads: one acceptor thread (owns the listening socket) and one thread per accepted
// connection (owns that socket). A connection thread reads a part's header and entry
// table, admits every entry through the MemoryRegistry (registered memory, and the write
// grant the entry names: write_grant.h) and pins what it admitted, and only
// then lands the payload: the pieces of strided runs of at most
// TcpOptions::recv_stage_max_bytes (and single blocks of at most stage_max_bytes) are
// read 256 KiB at a time into a staging buffer and copied into place
// with streaming stores (scatter_copy.h: into a cold pool that costs about half of what
// the kernel's copy of small pieces costs); larger pieces are read with readv() straight
// into the destinations (adjacent destinations share an iovec; IOV_MAX per call). It ACKs the part after its last byte landed (and, if the part
// carries its batch's note, after handing the note to the NoteSink: batch_note.h). A part
// with an entry outside registered memory or its grant is read into a scratch buffer and
// discarded (not one byte of it reaches memory, its note is not delivered) and ACKed with
// OutOfRange naming the entry; the connection stays usable.
//
// Device memory: a part with an entry inside a registered device region (DeviceRegions)
// is read through the connection's pinned slabs (DeviceSlabRing) a slab at a time, each
// landed with host-to-device copies on the connection's own device stream while the next
// slab fills from the socket; the ACK goes out only after the last copy landed, so
// "completion = applied" holds for device memory too. An entry that straddles the edge
// of device memory is refused like one outside registered memory. A failed copy makes the
// part fail (its ACK carries the driver's error; its note is not delivered) and the
// connection goes on.
//
// With a cluster secret a connection first passes the mutual handshake of tcp_auth.h; one
// that fails it is closed before any frame is read. A new connection must send its first
// byte within io_timeout_ms.
//
// A malformed header or entry table, or a peer that stalls mid-part for io_timeout_ms,
// closes that connection only (logged); the acceptor and other connections keep serving.
// So does a part still landing a second after a write grant it lands under was revoked
// (its room ended): bytes trickled into it must not keep the room's end hidden and its
// pages held (memory_registry.h), so the part is cut wherever it is.
// Limits (entry count per part) are checked before anything is allocated.
//
// Thread safety: start() once, then the destructor (stops and joins every thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "common/cluster_key.h"
#include "common/mutex.h"
#include "common/status.h"
#include "engine/backends/tcp/socket_util.h"
#include "engine/engine_options.h"

namespace pdkv::engine {
class DeviceRegions;
class MemoryRegistry;
class NoteSink;
enum class Refusal : uint8_t;
}  // namespace pdkv::engine

namespace pdkv::engine::tcp {

struct ReceiveBuffers;

class TcpReceiver {
 public:
  // `registry` outlives the receiver. With `cluster_key`, every connection must pass the
  // handshake of tcp_auth.h before its first frame is read.
  // `notes` (may be null: notes are then dropped) gets the note of every part applied.
  TcpReceiver(const TcpOptions& options, const MemoryRegistry* registry,
              const DeviceRegions* device_regions, std::shared_ptr<const ClusterKey> cluster_key,
              NoteSink* notes);
  ~TcpReceiver();
  TcpReceiver(const TcpReceiver&) = delete;
  TcpReceiver& operator=(const TcpReceiver&) = delete;

  // Takes the listening socket and starts the acceptor thread.
  void start(UniqueFd listen_fd);

 private:
  struct Connection {
    std::thread thread;
    std::atomic<bool> done{false};
    // The peer's IP address, and whether the connection is past its opening: the
    // session handshake with a cluster secret, its first frame without one. Until then it
    // counts against the limits on unproven connections (accept_loop).
    std::string address;
    std::atomic<bool> proven{false};
  };
  void accept_loop();
  // Why a new connection from `address` must be refused, or "" if it may be served
  // (engine/connection_slots.h).
  std::string over_limit(const std::string& address) const PDKV_REQUIRES(conns_mu_);
  void serve(int fd, Connection* conn);
  Status scatter(int fd, ReceiveBuffers& buf, int stop) const;
  // Marks each admitted entry's destination device; false if one straddles the edge of
  // device memory (its index in *bad). Returns the part's device, or -1 for host only.
  bool mark_destination_devices(ReceiveBuffers& buf, int* device, size_t* bad) const;
  // Lands a part with device destinations through the slabs. A socket error is returned
  // (the connection ends); a copy error goes to *copy_error (the part fails, the
  // connection goes on).
  Status scatter_device(int fd, ReceiveBuffers& buf, int device, int stop,
                        Status* copy_error) const;
  size_t admit_entries(ReceiveBuffers& buf, uint64_t* bad_addr, Refusal* why) const;
  void reap_finished(bool all) PDKV_REQUIRES(conns_mu_);

  const TcpOptions options_;
  const MemoryRegistry* const registry_;
  const DeviceRegions* const device_regions_;
  const std::shared_ptr<const ClusterKey> cluster_key_;
  NoteSink* const notes_;
  EventFd stop_;
  UniqueFd listen_fd_;  // acceptor thread only, after start()
  std::thread acceptor_;

  Mutex conns_mu_;
  std::list<std::unique_ptr<Connection>> conns_ PDKV_GUARDED_BY(conns_mu_);
};

}  // namespace pdkv::engine::tcp
