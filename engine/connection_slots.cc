#include "engine/connection_slots.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <algorithm>

namespace pdkv::engine {

std::string slot_refusal(size_t max_connections, const SlotUse& use, const std::string& address) {
  if (use.open >= max_connections) {
    return fmt::format("{} connections already open (limit)", max_connections);
  }
  const size_t unproven_max = max_connections - max_connections / 4;
  const size_t per_address_max = std::max<size_t>(1, max_connections / 8);
  if (use.unproven >= unproven_max) {
    return fmt::format("{} connections awaiting their handshake (limit {} of {})", use.unproven,
                       unproven_max, max_connections);
  }
  if (use.unproven_from_address >= per_address_max) {
    return fmt::format("{} connections from {} awaiting their handshake (limit {})",
                       use.unproven_from_address, address, per_address_max);
  }
  return "";
}

std::string peer_address(const sockaddr_storage& peer) {
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(peer).sin_addr, text, sizeof text);
  } else if (peer.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr, text,
                sizeof text);
  }
  return text;
}

}  // namespace pdkv::engine
