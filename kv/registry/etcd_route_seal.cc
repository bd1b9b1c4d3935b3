#include "kv/registry/etcd_route_seal.h"

#include <fmt/format.h>
#include <sodium.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace pdkv::kv {
namespace {

using nlohmann::json;

constexpr std::string_view kLabel = "pdkv-etcd-route-v2";

std::string incarnation_hex(uint64_t incarnation) { return fmt::format("{:016x}", incarnation); }

// Every part is length-framed by ClusterKey::mac, so no two part lists collide.
ClusterKey::Mac route_mac(const ClusterKey& key, std::string_view etcd_key, int64_t lease,
                          std::string_view route_json, const SealStamp& stamp) {
  const std::string lease_text = std::to_string(lease);
  const std::string incarnation = incarnation_hex(stamp.incarnation);
  const std::string started = std::to_string(stamp.started_ms);
  const std::string expires = std::to_string(stamp.expires_ms);
  return key.mac(KeyUse::kEtcdRoute,
                 {as_bytes(kLabel), as_bytes(etcd_key), as_bytes(lease_text), as_bytes(route_json),
                  as_bytes(incarnation), as_bytes(started), as_bytes(expires)});
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
  SealStamp stamp;
  bool well_formed = false;
};
std::optional<Envelope> parse_envelope(const std::string& value) {
  json j = json::parse(value, nullptr, false);
  if (!j.is_object() || !j.contains("mac")) return std::nullopt;
  Envelope e;
  auto route = j.find("route");
  auto mac = j.find("mac");
  auto incarnation = j.find("incarnation");
  auto started = j.find("started_ms");
  auto expires = j.find("expires_ms");
  if (route != j.end() && route->is_string()) e.route = route->get<std::string>();
  // Claims to be sealed but is not well formed (or is an older, unstamped seal): never
  // verifies with a key; without one its route is still read, unverified.
  if (j.size() != 5 || route == j.end() || !route->is_string() || !mac->is_string() ||
      incarnation == j.end() || !incarnation->is_string() ||
      incarnation->get_ref<const std::string&>().size() != 16 || started == j.end() ||
      !started->is_number_integer() || expires == j.end() || !expires->is_number_integer())
    return e;
  e.mac_hex = mac->get<std::string>();
  e.stamp.incarnation =
      std::strtoull(incarnation->get_ref<const std::string&>().c_str(), nullptr, 16);
  e.stamp.started_ms = started->get<int64_t>();
  e.stamp.expires_ms = expires->get<int64_t>();
  // Round-trips exactly, or the MAC (over the printed form) cannot match what was sent.
  e.well_formed = incarnation_hex(e.stamp.incarnation) == incarnation->get<std::string>();
  return e;
}

}  // namespace

int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string seal_route_entry(const ClusterKey* key, std::string_view etcd_key, int64_t lease,
                             std::string_view route_json, const SealStamp& stamp) {
  if (key == nullptr) return std::string(route_json);
  const ClusterKey::Mac mac = route_mac(*key, etcd_key, lease, route_json, stamp);
  return json{{"route", route_json},
              {"incarnation", incarnation_hex(stamp.incarnation)},
              {"started_ms", stamp.started_ms},
              {"expires_ms", stamp.expires_ms},
              {"mac", to_hex(mac)}}
      .dump();
}

std::string seal_route_entry(const ClusterKey* key, std::string_view etcd_key, int64_t lease,
                             std::string_view route_json) {
  const int64_t t = unix_now_ms();
  const SealStamp stamp{
      0, t, t + std::chrono::duration_cast<std::chrono::milliseconds>(kOneOffSealLifetime).count()};
  return seal_route_entry(key, etcd_key, lease, route_json, stamp);
}

Result<OpenedRouteEntry> open_sealed_route_entry(const ClusterKey* key, const EtcdKeyValue& kv,
                                                 int64_t now_ms) {
  std::optional<Envelope> sealed = parse_envelope(kv.value);
  if (key == nullptr) {
    PDKV_ASSIGN_OR_RETURN(bootstrap::PrefillRegistration reg,
                          bootstrap::parse_registration(sealed ? sealed->route : kv.value));
    return OpenedRouteEntry{std::move(reg), SealStamp{}};
  }
  if (!sealed) return unauthenticated("the entry is not signed with the cluster secret");
  ClusterKey::Mac mac{};
  size_t got = 0;
  // Exactly 64 hex digits; the comparison below is libsodium's constant-time one.
  if (!sealed->well_formed || sealed->mac_hex.size() != 2 * mac.size() ||
      sodium_hex2bin(mac.data(), mac.size(), sealed->mac_hex.data(), sealed->mac_hex.size(),
                     nullptr, &got, nullptr) != 0 ||
      got != mac.size() ||
      !key->verify(KeyUse::kEtcdRoute, mac,
                   {as_bytes(kLabel), as_bytes(kv.key), as_bytes(std::to_string(kv.lease)),
                    as_bytes(sealed->route), as_bytes(incarnation_hex(sealed->stamp.incarnation)),
                    as_bytes(std::to_string(sealed->stamp.started_ms)),
                    as_bytes(std::to_string(sealed->stamp.expires_ms))})) {
    return unauthenticated(
        "the entry's signature does not verify for this key and lease (rewritten, copied "
        "from another key, put under another lease, signed with another secret, or sealed "
        "without an owner's run and expiry)");
  }
  if (sealed->stamp.expires_ms + kSealClockSkew.count() < now_ms) {
    return unauthenticated(fmt::format(
        "the entry's sealed expiry passed {} ms ago (its owner stopped re-sealing it: the "
        "rank is gone, and its lease is kept alive or its entry replayed)",
        now_ms - sealed->stamp.expires_ms));
  }
  PDKV_ASSIGN_OR_RETURN(bootstrap::PrefillRegistration reg,
                        bootstrap::parse_registration(sealed->route));
  return OpenedRouteEntry{std::move(reg), sealed->stamp};
}

Result<bootstrap::PrefillRegistration> open_route_entry(const ClusterKey* key,
                                                        const EtcdKeyValue& kv) {
  PDKV_ASSIGN_OR_RETURN(OpenedRouteEntry opened, open_sealed_route_entry(key, kv, unix_now_ms()));
  return std::move(opened.reg);
}

}  // namespace pdkv::kv
