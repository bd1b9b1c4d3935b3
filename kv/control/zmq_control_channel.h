// The production ControlChannel: proto::ZmqEndpoint (one PULL socket, cached per-peer
// PUSH sockets with bounded sends). Options come from PDKV_ZMQ_* (docs/CONFIG.md).
#pragma once

#include "common/config.h"
#include "kv/control/control_channel.h"
#include "proto/zmq_endpoint_options.h"

namespace pdkv::kv {

// Channels bind tcp://<host>:* and advertise that host. PDKV_ZMQ_* come from `settings`
// if set there, else the environment. Fails creation with the options' InvalidArgument
// if one is malformed.
ControlChannelFactory zmq_channel_factory(config::Settings settings = config::Settings());
// Channels with these options (read once by the caller; bind_host is set per channel).
ControlChannelFactory zmq_channel_factory(proto::EndpointOptions options);

}  // namespace pdkv::kv
