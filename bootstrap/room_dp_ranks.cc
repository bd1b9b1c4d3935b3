#include "bootstrap/room_dp_ranks.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "bootstrap/registration.h"

namespace pdkv::bootstrap {
namespace {

using nlohmann::json;

Status field_error(std::string* bad_field, const char* field, const std::string& message) {
  if (bad_field) *bad_field = field;
  return invalid_argument(message);
}

Result<json> parse_body(std::string_view body, std::string* bad_field) {
  if (body.size() > kMaxBodyBytes) return field_error(bad_field, "body", "body is too large");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return field_error(bad_field, "body", "body is not a JSON object");
  return j;
}

// A room: a non-negative JSON integer, or a decimal string of one (sglang's decode sends
// integers; a client limited to doubles can send strings without losing bits).
std::optional<uint64_t> room_of(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return std::nullopt;  // negative
  if (!v.is_string()) return std::nullopt;
  const std::string& s = v.get_ref<const std::string&>();
  uint64_t out = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return out;
}

}  // namespace

Result<RoomDpRank> parse_room_dp_rank(std::string_view body, std::string* bad_field) {
  PDKV_ASSIGN_OR_RETURN(json j, parse_body(body, bad_field));
  if (!j.contains("bootstrap_room")) {
    return field_error(bad_field, "bootstrap_room", "bootstrap_room is missing");
  }
  auto room = room_of(j["bootstrap_room"]);
  if (!room) {
    return field_error(bad_field, "bootstrap_room",
                       "bootstrap_room must be a non-negative integer");
  }
  if (!j.contains("dp_rank")) return field_error(bad_field, "dp_rank", "dp_rank is missing");
  const json& r = j["dp_rank"];
  if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= kMaxWorldSize) {
    return field_error(bad_field, "dp_rank",
                       "dp_rank must be an integer in [0, " + std::to_string(kMaxWorldSize) + ")");
  }
  return RoomDpRank{*room, r.get<int64_t>()};
}

std::string room_query_answer(const std::vector<RoomDpRank>& found) {
  json out = json::object();
  for (const RoomDpRank& e : found) out[std::to_string(e.room)] = e.dp_rank;
  return out.dump();
}

std::optional<std::string> dp_rank_outside(int64_t dp_rank, int64_t dp_size) {
  if (dp_rank < dp_size) return std::nullopt;
  return "dp_rank " + std::to_string(dp_rank) + " outside the instance's dp_size " +
         std::to_string(dp_size);
}

Result<std::vector<uint64_t>> parse_room_query(std::string_view body, std::string* bad_field) {
  PDKV_ASSIGN_OR_RETURN(json j, parse_body(body, bad_field));
  if (!j.contains("bootstrap_rooms") || !j["bootstrap_rooms"].is_array()) {
    return field_error(bad_field, "bootstrap_rooms", "bootstrap_rooms must be a list of rooms");
  }
  const json& list = j["bootstrap_rooms"];
  if (list.size() > kMaxRoomsPerQuery) {
    return field_error(
        bad_field, "bootstrap_rooms",
        "bootstrap_rooms holds more than " + std::to_string(kMaxRoomsPerQuery) + " rooms");
  }
  std::vector<uint64_t> rooms;
  rooms.reserve(list.size());
  for (const json& v : list) {
    auto room = room_of(v);
    if (!room) {
      return field_error(bad_field, "bootstrap_rooms",
                         "every entry of bootstrap_rooms must be a non-negative integer");
    }
    rooms.push_back(*room);
  }
  return rooms;
}

RoomDpRanks::RoomDpRanks(SteadyClock::duration ttl, size_t capacity, size_t per_source_capacity)
    : ttl_(ttl),
      capacity_(std::max<size_t>(1, capacity)),
      per_source_capacity_(std::max<size_t>(1, per_source_capacity)) {}

void RoomDpRanks::remove(uint64_t room) {
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return;
  Source* source = it->second.source;
  const size_t held = source->rooms.size();
  by_holding_.erase({held, source});
  source->rooms.erase(it->second.in_source);
  order_.erase(it->second.in_order);
  rooms_.erase(it);
  if (held > 1) {
    by_holding_.insert({held - 1, source});
  } else {
    // Holds nothing: forgotten, so the sources stay bounded. (The key is copied: erasing
    // by a reference into the element being erased is not safe.)
    const std::string address = source->address;
    sources_.erase(address);
  }
}

void RoomDpRanks::expire(TimePoint at) {
  while (!order_.empty() && at - rooms_.at(order_.front()).at >= ttl_) remove(order_.front());
}

void RoomDpRanks::put(const RoomDpRank& entry, std::string_view source, TimePoint at) {
  MutexLock lock(mu_);
  expire(at);
  remove(entry.room);  // a re-registration takes a fresh place, leaving nothing behind
  const std::string address(source);
  if (auto it = sources_.find(address);
      it != sources_.end() && it->second.rooms.size() >= per_source_capacity_) {
    remove(it->second.rooms.front());  // past its share: its own oldest room goes
  }
  if (rooms_.size() >= capacity_) {
    // Full: the source holding the most gives up its oldest room.
    remove(by_holding_.rbegin()->second->rooms.front());
  }
  Source& owner = sources_[address];
  if (owner.rooms.empty()) {
    owner.address = address;
  } else {
    by_holding_.erase({owner.rooms.size(), &owner});
  }
  owner.rooms.push_back(entry.room);
  order_.push_back(entry.room);
  rooms_.emplace(entry.room, Entry{entry.dp_rank, at, &owner, std::prev(order_.end()),
                                   std::prev(owner.rooms.end())});
  by_holding_.insert({owner.rooms.size(), &owner});
}

std::vector<RoomDpRank> RoomDpRanks::find(const std::vector<uint64_t>& rooms, TimePoint at) const {
  MutexLock lock(mu_);
  std::vector<RoomDpRank> out;
  for (uint64_t room : rooms) {
    auto it = rooms_.find(room);
    if (it != rooms_.end() && at - it->second.at < ttl_) out.push_back({room, it->second.dp_rank});
  }
  return out;
}

size_t RoomDpRanks::size() const {
  MutexLock lock(mu_);
  return rooms_.size();
}

size_t RoomDpRanks::held_by(std::string_view source) const {
  MutexLock lock(mu_);
  auto it = sources_.find(std::string(source));
  return it == sources_.end() ? 0 : it->second.rooms.size();
}

}  // namespace pdkv::bootstrap
