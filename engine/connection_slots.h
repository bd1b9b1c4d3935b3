// How many of an engine's data-plane connection slots (PDKV_TCP_MAX_CONNECTIONS) may be
// held by connections that have not finished their opening yet (the session handshake
// with a cluster secret, the first frame without one), in all and per peer address. One
// rule for the tcp receiver and the shm/ucx lease server (docs/SECURITY.md).
//
// Unproven connections may hold at most three quarters of the slots, and those from one
// address at most an eighth: a stranger on one address, reopening silent connections as
// fast as they are closed, cannot keep a member's new session from another address out.
// Strangers on six or more addresses together still can.
//
// Thread safety: pure functions.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <string>

namespace pdkv::engine {

struct SlotUse {
  size_t open = 0;                   // every connection being served
  size_t unproven = 0;               // of those, not past their opening
  size_t unproven_from_address = 0;  // of those, from the new connection's address
};

// Why a new connection from `address` must be refused ("no connection slot for it" is
// what the caller prefixes), or "" if it may be served.
std::string slot_refusal(size_t max_connections, const SlotUse& use, const std::string& address);

// The peer's IP address as text, "" if not IPv4 or IPv6: what the per-address limit
// counts by.
std::string peer_address(const sockaddr_storage& peer);

}  // namespace pdkv::engine
