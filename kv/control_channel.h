// ControlChannel: how a KV manager sends control-plane messages, and the factory that
// makes one. The managers only see this interface; the production channel is ZeroMQ
// (kv/zmq_control_channel.h over proto/zmq_endpoint.h), tests may use an in-process one.
//
// Contract: messages from one sender to one peer arrive in order (ZeroMQ PUSH/PULL keeps
// per-pipe order, which the protocol relies on: a registration goes ahead of the
// pre-allocations that need it). send() never blocks for long: a dead peer makes it
// return Unavailable (or drop after a bounded queue), never stall the caller.
// The handler runs on the channel's receive thread, one message at a time; it must not
// block on data-plane work.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "proto/messages.h"

namespace pdkv::kv {

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  // Where peers send to this channel, e.g. "tcp://10.0.0.5:41234".
  virtual const std::string& endpoint() const = 0;
  // Thread-safe.
  virtual Status send(const std::string& peer_endpoint, const proto::Message& message) = 0;
  // Stops the receive thread (joins it; the handler never runs again) and makes later
  // sends fail with Aborted. Idempotent; must not be called from the handler.
  virtual void stop() = 0;
};

using MessageHandler = std::function<void(proto::Message message)>;

// Binds a channel on `host` (any free port) whose receive thread calls `handler`.
using ControlChannelFactory = std::function<Result<std::unique_ptr<ControlChannel>>(
    const std::string& host, MessageHandler handler)>;

}  // namespace pdkv::kv
