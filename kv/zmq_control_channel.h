// The production ControlChannel: proto::ZmqEndpoint (one PULL socket, cached per-peer
// PUSH sockets with bounded sends). Options come from PDKV_ZMQ_* (docs/CONFIG.md).
#pragma once

#include "kv/control_channel.h"

namespace pdkv::kv {

// Channels bind tcp://<host>:* and advertise that host. Fails creation with the options'
// InvalidArgument if a PDKV_ZMQ_* variable is malformed.
ControlChannelFactory zmq_channel_factory();

}  // namespace pdkv::kv
