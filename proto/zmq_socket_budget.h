// How many peers one ZmqEndpoint may keep a socket for, and the process limits that
// number needs.
//
// Each peer costs three ZeroMQ sockets (its PUSH socket and the monitor's PAIR pair) and
// about four descriptors (a mailbox per socket, the TCP connection). ZeroMQ's default of
// 1023 sockets per context would stop an endpoint at ~340 peers, below the KV managers'
// own peer caps, and a process at Debian's default soft RLIMIT_NOFILE (1024) would run out
// of descriptors sooner. The budget sizes the context for the wanted peers and raises the
// soft descriptor limit towards the hard one (as Go's runtime does at start); what still
// does not fit lowers the peer count, with a warning saying which limit to raise.
// Thread safety: plain functions; raise_descriptor_limit() changes process state.
#pragma once

#include <cstddef>
#include <string>

namespace pdkv::proto {

inline constexpr int kSocketsPerPeer = 3;
inline constexpr size_t kDescriptorsPerPeer = 4;
// One-off sockets (ZmqEndpoint::send_once) allowed a second; each lingers up to 250 ms,
// so at most this many are open at once.
inline constexpr int kOneOffSocketsPerSecond = 256;
// Sockets and descriptors an endpoint needs besides its peers': the PULL socket, the ZAP
// handler, one-off sockets (a mailbox and a connection each), the engine, the process's
// own files.
inline constexpr int kReservedSockets = 64 + kOneOffSocketsPerSecond;
inline constexpr size_t kReservedDescriptors = 256 + 2 * kOneOffSocketsPerSecond;

struct SocketBudget {
  size_t max_peers = 0;  // peers the endpoint keeps sockets for
  int max_sockets = 0;   // ZMQ_MAX_SOCKETS of its context
  std::string warning;   // non-empty when fewer peers than wanted fit, and why
};

// `wanted_peers` > 0; `socket_limit` is ZMQ_SOCKET_LIMIT (the most libzmq allows);
// `descriptors` the soft RLIMIT_NOFILE after raise_descriptor_limit().
SocketBudget plan_socket_budget(size_t wanted_peers, int socket_limit, size_t descriptors);

// Raises the soft RLIMIT_NOFILE to at least `wanted` if the hard limit allows (never
// lowers it); returns the soft limit in force afterwards.
size_t raise_descriptor_limit(size_t wanted);

}  // namespace pdkv::proto
