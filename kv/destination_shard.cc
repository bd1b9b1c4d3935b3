#include "kv/destination_shard.h"

#include <algorithm>
#include <cstdint>

namespace pdkv::kv {

size_t destination_shard(std::vector<std::string> destinations, size_t shard_count) {
  std::sort(destinations.begin(), destinations.end());
  destinations.erase(std::unique(destinations.begin(), destinations.end()), destinations.end());
  // FNV-1a over the ids with a separator byte that cannot occur inside "host:port".
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&hash](unsigned char byte) {
    hash ^= byte;
    hash *= 1099511628211ull;
  };
  for (const std::string& id : destinations) {
    for (unsigned char c : id) mix(c);
    mix(0);
  }
  // Final avalanche so that low bits (used by the modulo) depend on every input byte.
  hash ^= hash >> 33;
  hash *= 0xff51afd7ed558ccdull;
  hash ^= hash >> 33;
  return static_cast<size_t>(hash % shard_count);
}

}  // namespace pdkv::kv
