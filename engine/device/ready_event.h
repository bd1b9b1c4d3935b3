// ReadyEvent: "the batch's source bytes are valid once this point of a device stream is
// reached", as a device event pdkv owns.
//
// A caller that wrote its source with a device stream (a model's forward pass writing
// the KV cache) names that stream when it submits. pdkv records one of its own events on
// it right then, so the caller may go on using the stream (and re-use its own events)
// at once; pdkv's staging copies later wait for that event on the device, never on the
// host. Events come from a per-device pool: recording one is cheap, creating one is a
// driver call, and a busy prefill submits thousands of batches a second.
//
// Thread safety: ReadyEventPool may be used from any thread; a ReadyEvent is immutable
// once made and returns to its pool when its last holder lets go (a wait enqueued on a
// device stream captured the event's state when it was enqueued, so re-recording the
// pooled event later never changes it).
#pragma once

#include <memory>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/device/device_driver.h"

namespace pdkv::engine {

class ReadyEventPool;

class ReadyEvent {
 public:
  ~ReadyEvent();
  ReadyEvent(const ReadyEvent&) = delete;
  ReadyEvent& operator=(const ReadyEvent&) = delete;
  DeviceEventHandle handle() const { return event_; }
  int device() const { return device_; }
  // Blocks the calling thread until the point is passed (at once when it already was),
  // for a reader on the CPU; the thread gets its own current context back.
  Status wait_on_host() const;

 private:
  friend class ReadyEventPool;
  ReadyEvent(std::shared_ptr<ReadyEventPool> pool, DeviceEventHandle event, int device)
      : pool_(std::move(pool)), event_(event), device_(device) {}
  std::shared_ptr<ReadyEventPool> pool_;
  DeviceEventHandle event_;
  int device_;
};

// The events a batch's device sources wait for (usually one; several when a batch gathers
// pieces that different streams wrote).
using ReadyEvents = std::vector<std::shared_ptr<const ReadyEvent>>;

class ReadyEventPool : public std::enable_shared_from_this<ReadyEventPool> {
 public:
  explicit ReadyEventPool(DeviceDriver* driver) : driver_(driver) {}
  ~ReadyEventPool();

  // Records an event on `stream` (of `device`; the calling thread is bound to it).
  Result<std::shared_ptr<const ReadyEvent>> record_on(DeviceStreamHandle stream, int device);

 private:
  friend class ReadyEvent;
  void give_back(DeviceEventHandle event, int device);

  DeviceDriver* const driver_;
  Mutex mu_;
  std::vector<std::pair<int, DeviceEventHandle>> free_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::engine
