// The production ControlChannel: proto::ZmqEndpoint (one PULL socket, cached per-peer
// PUSH sockets with bounded sends). Options come from PDKV_ZMQ_* (docs/CONFIG.md).
#pragma once

#include "kv/control/control_channel.h"
#include "proto/zmq_endpoint_options.h"

namespace pdkv::kv {

// Channels with these options (read once by the caller: ManagerFactory reads PDKV_ZMQ_*
// and the cluster secret with the rest of a manager's settings); each binds
// tcp://<host>:* and advertises that host (bind_host is set per channel).
ControlChannelFactory zmq_channel_factory(proto::EndpointOptions options);

}  // namespace pdkv::kv
