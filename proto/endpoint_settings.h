// Settings of the ZeroMQ control-plane endpoint (EndpointOptions::from).
//
// Each spec is the one place its setting's name, default, range and help text are written
// (common/setting_spec.h); docs/CONFIG.md's rows are generated from it.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/setting_spec.h"

namespace pdkv::proto {

inline constexpr config::SettingSpec kZmqSndHwm =
    config::int_setting("PDKV_ZMQ_SNDHWM", 10000, 1, 1000000)
        .described(
            "control-plane messages queued per peer (ZMQ_SNDHWM, also the receive HWM and the most "
            "decoded messages the receive thread holds). Sends never block: a message is queued "
            "(also before the peer is connected: it leaves once connected) or, with this many "
            "already queued, refused at once with Unavailable, which the managers retry. 10000 "
            "holds a burst of 1024 rooms' messages several times over. A peer whose connection "
            "closed and refuses reconnection is reported gone at once (its rooms fail), a silent "
            "one by the heartbeat below");

inline constexpr config::SettingSpec kZmqMaxPeers =
    config::int_setting("PDKV_ZMQ_MAX_PEERS", 8192, 16, int64_t{1} << 16)
        .described(
            "control plane: most peers one rank keeps a socket for (three ZeroMQ sockets and about "
            "four descriptors each). The rank sizes its ZeroMQ context for them (ZeroMQ's default "
            "of 1023 sockets would stop it near 340 peers) and raises its soft descriptor limit "
            "towards the hard one; if they still do not fit, it logs the limit to raise and keeps "
            "fewer. A send to one more peer fails with Unavailable. Sockets of peers a rank is done"
            " with are closed (a decode's prefill declared dead or gone, a prefill's decode that "
            "holds no room and was silent for 10 x the liveness bound, at least 30 s), and a "
            "registration refused for `PDKV_MAX_DECODE_PEERS` is answered on a one-off socket (at "
            "most 256 a second)");

}  // namespace pdkv::proto
