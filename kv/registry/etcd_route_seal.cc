#include "kv/registry/etcd_route_seal.h"

#include <sodium.h>

#include <nlohmann/json.hpp>

namespace pdkv::kv {
namespace {

using nlohmann::json;

constexpr std::string_view kLabel = "pdkv-etcd-route-v1";

ClusterKey::Mac route_mac(const ClusterKey& key, std::string_view etcd_key, int64_t lease,
                          std::string_view route_json) {
  const std::string lease_text = std::to_string(lease);
  return key.mac(KeyUse::kEtcdRoute, {as_bytes(kLabel), as_bytes(etcd_key), as_bytes(lease_text),
                                      as_bytes(route_json)});
}

std::string to_hex(std::span<const uint8_t> bytes) {
  std::string out(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes.data(), bytes.size());
  out.pop_back();
  return out;
}

// The envelope's parts, or nullopt when `value` is not one (a plain route, or garbage).
struct Envelope {
  std::string route;
  std::string mac_hex;
};
std::optional<Envelope> parse_envelope(const std::string& value) {
  json j = json::parse(value, nullptr, false);
  if (!j.is_object() || !j.contains("mac")) return std::nullopt;
  auto route = j.find("route");
  auto mac = j.find("mac");
  if (j.size() != 2 || route == j.end() || !route->is_string() || !mac->is_string())
    return Envelope{};  // claims to be sealed, but is not well formed: never verifies
  return Envelope{route->get<std::string>(), mac->get<std::string>()};
}

}  // namespace

std::string seal_route_entry(const ClusterKey* key, std::string_view etcd_key, int64_t lease,
                             std::string_view route_json) {
  if (key == nullptr) return std::string(route_json);
  const ClusterKey::Mac mac = route_mac(*key, etcd_key, lease, route_json);
  return json{{"route", route_json}, {"mac", to_hex(mac)}}.dump();
}

Result<bootstrap::PrefillRegistration> open_route_entry(const ClusterKey* key,
                                                        const EtcdKeyValue& kv) {
  std::optional<Envelope> sealed = parse_envelope(kv.value);
  if (key == nullptr) return bootstrap::parse_registration(sealed ? sealed->route : kv.value);
  if (!sealed) return unauthenticated("the entry is not signed with the cluster secret");
  ClusterKey::Mac mac{};
  size_t got = 0;
  // Exactly 64 hex digits; the comparison below is libsodium's constant-time one.
  if (sealed->mac_hex.size() != 2 * mac.size() ||
      sodium_hex2bin(mac.data(), mac.size(), sealed->mac_hex.data(), sealed->mac_hex.size(),
                     nullptr, &got, nullptr) != 0 ||
      got != mac.size() ||
      !key->verify(KeyUse::kEtcdRoute, mac,
                   {as_bytes(kLabel), as_bytes(kv.key), as_bytes(std::to_string(kv.lease)),
                    as_bytes(sealed->route)})) {
    return unauthenticated(
        "the entry's signature does not verify for this key and lease (rewritten, copied "
        "from another key, put under another lease, or signed with another secret)");
  }
  return bootstrap::parse_registration(sealed->route);
}

}  // namespace pdkv::kv
