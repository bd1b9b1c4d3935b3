// IpcWriter: the writing side of one cuda_ipc session (cuda_ipc_backend.h): a LeasedPeer
// whose write_part() copies a granted part with the GPU into the receiver's memory mapped
// here.
//
// Per part: the handle table is fetched again when the grant's epoch differs from ours;
// every piece's destination is translated into the mapping (a destination outside every
// exported piece fails the part before any copy); equally spaced pieces become one
// strided 2-D copy (pitch within kMaxCopyPitch, the run inside one piece on both sides),
// the rest one batched copy; an event recorded behind them is waited for before the part
// is reported done.
//
// Threads: the LeasedPeer sender thread runs write_part(); wait_on_device() runs on the
// posting thread. Thread safety: as LeasedPeer.
#pragma once

#include <string>
#include <vector>

#include "common/mutex.h"
#include "engine/backends/cuda_ipc/import_table.h"
#include "engine/device/device_driver.h"
#include "engine/device/ready_event.h"
#include "engine/lease/leased_peer.h"

namespace pdkv::engine {
class DeviceRegions;
}

namespace pdkv::engine::cuda_ipc {

// The largest row pitch a 2-D copy is given (CU_DEVICE_ATTRIBUTE_MAX_PITCH is 2^31 - 1 on
// every GPU pdkv knows); a run spaced wider is copied as single pieces.
inline constexpr uint64_t kMaxCopyPitch = (uint64_t{1} << 31) - 1;

struct IpcWriterOptions {
  uint64_t part_bytes = 256ull << 20;
  int io_timeout_ms = 5000;
  std::string socket_name;  // the receiver's handle socket (abstract)
  std::string token;        // this session's token for it
};

// Driver calls one write_part issued (for the benchmark's report).
struct WriterCounters {
  std::atomic<uint64_t> strided{0};
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> pieces{0};
};
WriterCounters& writer_counters();

class IpcWriter final : public lease::LeasedPeer {
 public:
  IpcWriter(std::string endpoint, CompletionSink* sink, IpcWriterOptions options,
            const DeviceRegions* device_regions);
  ~IpcWriter() override;

  // Fetches the receiver's handle table over its socket (at connect, and on a new epoch).
  Status fetch_table();
  // Makes this session's stream wait on the device for every event: the copies of posts
  // made after it are ordered behind the sender's ready points.
  Status wait_on_device(const ReadyEvents& ready);

 protected:
  Status write_part(std::span<const lease::Piece> pieces, const lease::Grant& grant,
                    TimePoint lease_deadline) override;

 private:
  struct Local {
    uint64_t src;
    uint64_t dst;  // mapped here
    uint64_t length;
  };
  // Picks the device the copies run on (once per session), with its stream and event.
  Status use_device(int hint) PDKV_EXCLUDES(mu_);
  Status check_peer_access(int device);
  Status translate(std::span<const lease::Piece> pieces);
  Status issue_copies();

  const IpcWriterOptions options_;
  const DeviceRegions* const device_regions_;
  DeviceDriver* const driver_;
  IpcDriver* const ipc_;
  ImportTable imports_;  // sender thread (and fetch_table before start)

  Mutex mu_;
  int device_ PDKV_GUARDED_BY(mu_) = -1;
  DeviceStreamHandle stream_ = nullptr;  // set once with device_
  DeviceEventHandle done_ = nullptr;

  // Sender thread only; reused across parts.
  uint64_t checked_epoch_ = 0;  // the table whose GPUs were checked for peer access
  std::vector<Local> local_;
  std::vector<uint64_t> piece_ends_;
  std::vector<CopyPiece> d2d_, h2d_;
};

}  // namespace pdkv::engine::cuda_ipc
