// ZeroMQ control channels for tests that build a manager or a peer's channel by hand
// instead of through ManagerFactory: PDKV_ZMQ_* and the cluster secret read from the
// environment once, when the factory is made (as ManagerFactory reads them once).
#pragma once

#include "kv/control/control_channel.h"

namespace pdkv::kv::testing {

// A malformed setting or secret file fails every channel the factory makes, with the
// options' error.
ControlChannelFactory zmq_channels_from_environment();

}  // namespace pdkv::kv::testing
