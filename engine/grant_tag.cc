#include "engine/grant_tag.h"

#include <fmt/format.h>
#include <sodium.h>

#include <array>
#include <cstring>

namespace pdkv::engine {
namespace {

using TagKey = std::array<unsigned char, crypto_shorthash_KEYBYTES>;

// Drawn on first use. If libsodium cannot start, the key stays zero: tags then still
// hide the id (it is hashed), they are only the same in every such process.
const TagKey& tag_key() {
  static const TagKey key = [] {
    TagKey k{};
    if (sodium_init() >= 0) crypto_shorthash_keygen(k.data());
    return k;
  }();
  return key;
}

}  // namespace

std::string grant_tag(uint64_t grant_id) {
  if (grant_id == 0) return "no grant";
  unsigned char id[sizeof grant_id];
  std::memcpy(id, &grant_id, sizeof id);
  unsigned char hash[crypto_shorthash_BYTES];
  crypto_shorthash(hash, id, sizeof id, tag_key().data());
  uint32_t tag = 0;
  std::memcpy(&tag, hash, sizeof tag);
  return fmt::format("grant tag {:08x}", tag);
}

}  // namespace pdkv::engine
