// Which prefill DP group serves a room, for decodes that cannot derive it from the room.
//
// An engine whose prefill load balancer does not place a request on DP group
// room % dp_size (sglang's non-"follow_bootstrap_room" methods) has each prefill tell the
// bootstrap server where the room went; the decode asks before it resolves the room's
// ranks. These are sglang's bootstrap routes, under its names:
//   POST /register_dp_rank  {"bootstrap_room": u64, "dp_rank": int}
//   POST /query_dp_ranks    {"bootstrap_rooms": [u64, ...]} -> {"<room>": dp_rank, ...}
// Entries are only useful while the room is being bootstrapped, so each is dropped after
// `ttl`, and the table holds at most `capacity` rooms (the oldest go first): a client that
// registers endlessly costs bounded memory.
//
// Thread safety: every method may be called concurrently (one internal mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
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
Result<std::vector<uint64_t>> parse_room_query(std::string_view body,
                                               std::string* bad_field = nullptr);

class RoomDpRanks {
 public:
  RoomDpRanks(SteadyClock::duration ttl, size_t capacity) : ttl_(ttl), capacity_(capacity) {}

  // A later registration of the same room replaces the earlier one.
  void put(const RoomDpRank& entry, TimePoint at = now()) PDKV_EXCLUDES(mu_);
  // The rooms registered within ttl before `at`, with their DP ranks; unknown rooms are
  // left out.
  std::vector<RoomDpRank> find(const std::vector<uint64_t>& rooms, TimePoint at = now()) const
      PDKV_EXCLUDES(mu_);
  size_t size() const PDKV_EXCLUDES(mu_);

 private:
  struct Entry {
    int64_t dp_rank;
    TimePoint at;
  };
  void expire(TimePoint at) PDKV_REQUIRES(mu_);

  const SteadyClock::duration ttl_;
  const size_t capacity_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> rooms_ PDKV_GUARDED_BY(mu_);
  // Registration order (room, time): expiry and the capacity bound pop from the front;
  // an entry whose time no longer matches the map was replaced and is skipped.
  std::deque<std::pair<uint64_t, TimePoint>> order_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::bootstrap
