#include "proto/zmq_socket_budget.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>

namespace pdkv::proto {

SocketBudget plan_socket_budget(size_t wanted_peers, int socket_limit, size_t descriptors) {
  SocketBudget b;
  const size_t by_sockets =
      socket_limit > kReservedSockets
          ? static_cast<size_t>(socket_limit - kReservedSockets) / kSocketsPerPeer
          : 0;
  const size_t by_descriptors = descriptors > kReservedDescriptors
                                    ? (descriptors - kReservedDescriptors) / kDescriptorsPerPeer
                                    : 0;
  b.max_peers = std::max<size_t>(1, std::min({wanted_peers, by_sockets, by_descriptors}));
  b.max_sockets = static_cast<int>(b.max_peers) * kSocketsPerPeer + kReservedSockets;
  if (b.max_peers < wanted_peers) {
    b.warning = fmt::format(
        "zmq endpoint: room for {} peers, not the {} wanted (PDKV_ZMQ_MAX_PEERS): {}", b.max_peers,
        wanted_peers,
        by_descriptors <= by_sockets
            ? fmt::format("the descriptor limit is {} (raise `ulimit -n` / LimitNOFILE)",
                          descriptors)
            : fmt::format("libzmq allows {} sockets per context", socket_limit));
  }
  return b;
}

size_t raise_descriptor_limit(size_t wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < wanted) {
    rlimit raised = lim;
    raised.rlim_cur =
        lim.rlim_max == RLIM_INFINITY ? wanted : std::min<rlim_t>(wanted, lim.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<size_t>(lim.rlim_cur);
}

}  // namespace pdkv::proto
