// Which prefill DP group serves a room, for decodes that cannot derive it from the room.
//
// An engine whose prefill load balancer does not place a request on DP group
// room % dp_size (sglang's non-"follow_bootstrap_room" methods) has each prefill tell the
// bootstrap server where the room went; the decode asks before it resolves the room's
// ranks. These are sglang's bootstrap routes, under its names:
//   POST /register_dp_rank  {"bootstrap_room": u64, "dp_rank": int}
//   POST /query_dp_ranks    {"bootstrap_rooms": [u64, ...]} -> {"<room>": dp_rank, ...}
// Entries are only useful while the room is being bootstrapped, so each is dropped after
// `ttl`, and the table holds at most `capacity` rooms: a client that registers endlessly
// costs bounded memory.
//
// Without a cluster secret anyone may register, so the table is shared out by source (the
// client's address): a source holds at most `per_source_capacity` rooms, and past that
// its own oldest room makes way for its new one. When the whole table is full, the oldest
// room of the source holding the most makes way. A flooder on one address therefore
// replaces only its own rooms, and re-registering one room moves that room alone; a
// placement is lost to strangers only if they hold more rooms than its source on every
// one of their addresses (capacity / that source's rooms addresses at least).
//
// Thread safety: every method may be called concurrently (one internal mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"

namespace pdkv::bootstrap {

inline constexpr size_t kMaxRoomsPerQuery = 4096;

struct RoomDpRank {
  uint64_t room = 0;
  int64_t dp_rank = 0;
};

// kInvalidArgument naming the field for anything but {"bootstrap_room": non-negative
// integer, "dp_rank": integer in [0, 65536)}.
Result<RoomDpRank> parse_room_dp_rank(std::string_view body, std::string* bad_field = nullptr);
// kInvalidArgument naming the field for anything but {"bootstrap_rooms": [non-negative
// integers], at most kMaxRoomsPerQuery}. Rooms may also be decimal strings, as JSON
// clients that cannot write 64-bit integers send them.
// The body answering a room query: {"<room>": dp_rank, ...} for the rooms found (a room
// as a decimal string key, as sglang's decode reads it).
std::string room_query_answer(const std::vector<RoomDpRank>& found);

// Why `dp_rank` names no DP group of an instance with `dp_size` of them (a placement there
// would send the decode to a group that does not exist); nullopt when it is inside.
std::optional<std::string> dp_rank_outside(int64_t dp_rank, int64_t dp_size);

Result<std::vector<uint64_t>> parse_room_query(std::string_view body,
                                               std::string* bad_field = nullptr);

class RoomDpRanks {
 public:
  // capacity and per_source_capacity are at least 1 (smaller values count as 1).
  RoomDpRanks(SteadyClock::duration ttl, size_t capacity, size_t per_source_capacity);

  // A later registration of the same room replaces the earlier one, whichever source made
  // it, and counts against `source` from then on.
  void put(const RoomDpRank& entry, std::string_view source, TimePoint at = now())
      PDKV_EXCLUDES(mu_);
  // The rooms registered within ttl before `at`, with their DP ranks; unknown rooms are
  // left out.
  std::vector<RoomDpRank> find(const std::vector<uint64_t>& rooms, TimePoint at = now()) const
      PDKV_EXCLUDES(mu_);
  size_t size() const PDKV_EXCLUDES(mu_);
  // The rooms `source` holds now.
  size_t held_by(std::string_view source) const PDKV_EXCLUDES(mu_);

 private:
  struct Source {
    std::string address;
    std::list<uint64_t> rooms;  // its rooms, oldest first
  };
  struct Entry {
    int64_t dp_rank;
    TimePoint at;
    Source* source;
    std::list<uint64_t>::iterator in_order;   // in order_
    std::list<uint64_t>::iterator in_source;  // in source->rooms
  };
  void remove(uint64_t room) PDKV_REQUIRES(mu_);
  void expire(TimePoint at) PDKV_REQUIRES(mu_);

  const SteadyClock::duration ttl_;
  const size_t capacity_;
  const size_t per_source_capacity_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> rooms_ PDKV_GUARDED_BY(mu_);
  // Every room, oldest registration first: expiry pops from the front. Lists, not
  // deques, so a re-registered room leaves no stale record behind that could later push
  // out someone else's room.
  std::list<uint64_t> order_ PDKV_GUARDED_BY(mu_);
  // Sources holding at least one room (element addresses are stable: Entry points here).
  std::unordered_map<std::string, Source> sources_ PDKV_GUARDED_BY(mu_);
  // (rooms held, source), so the source holding the most is found in O(log sources).
  std::set<std::pair<size_t, Source*>> by_holding_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::bootstrap
