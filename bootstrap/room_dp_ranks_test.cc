// The room -> prefill DP group table: its parsers, its bounds, and the two routes over real
// HTTP on loopback (an embedded BootstrapServer on port 0).
#include "bootstrap/room_dp_ranks.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "bootstrap/client.h"
#include "bootstrap/server.h"
#include "bootstrap/test_server.h"
#include "bootstrap/test_util.h"

namespace pdkv::bootstrap {
namespace {

using nlohmann::json;
using std::chrono::seconds;

std::string field_of(std::string_view body) {
  std::string field;
  auto r = parse_room_dp_rank(body, &field);
  return r.ok() ? "" : field;
}

TEST(RoomDpRankParse, AcceptsSglangsBody) {
  auto r = parse_room_dp_rank(R"({"bootstrap_room": 18446744073709551615, "dp_rank": 3})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->room, 18446744073709551615ull);  // rooms are full 64-bit values
  EXPECT_EQ(r->dp_rank, 3);
  auto s = parse_room_dp_rank(R"({"bootstrap_room": "42", "dp_rank": 0})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->room, 42u);
}

TEST(RoomDpRankParse, NamesTheBadField) {
  EXPECT_EQ(field_of("[]"), "body");
  EXPECT_EQ(field_of("not json"), "body");
  EXPECT_EQ(field_of(R"({"dp_rank": 1})"), "bootstrap_room");
  EXPECT_EQ(field_of(R"({"bootstrap_room": -1, "dp_rank": 1})"), "bootstrap_room");
  EXPECT_EQ(field_of(R"({"bootstrap_room": 1.5, "dp_rank": 1})"), "bootstrap_room");
  EXPECT_EQ(field_of(R"({"bootstrap_room": "12x", "dp_rank": 1})"), "bootstrap_room");
  EXPECT_EQ(field_of(R"({"bootstrap_room": 1})"), "dp_rank");
  EXPECT_EQ(field_of(R"({"bootstrap_room": 1, "dp_rank": -1})"), "dp_rank");
  EXPECT_EQ(field_of(R"({"bootstrap_room": 1, "dp_rank": "1"})"), "dp_rank");
  EXPECT_EQ(field_of(R"({"bootstrap_room": 1, "dp_rank": 65536})"), "dp_rank");
}

TEST(RoomQueryParse, ListsAndLimits) {
  auto r = parse_room_query(R"({"bootstrap_rooms": [1, "2", 3]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<uint64_t>{1, 2, 3}));
  std::string field;
  EXPECT_FALSE(parse_room_query(R"({"bootstrap_rooms": 7})", &field).ok());
  EXPECT_EQ(field, "bootstrap_rooms");
  EXPECT_FALSE(parse_room_query(R"({"bootstrap_rooms": [1, -2]})", &field).ok());
  json big = {{"bootstrap_rooms", json::array()}};
  for (size_t i = 0; i <= kMaxRoomsPerQuery; ++i) big["bootstrap_rooms"].push_back(i);
  EXPECT_FALSE(parse_room_query(big.dump(), &field).ok());
  EXPECT_EQ(field, "bootstrap_rooms");
}

TEST(RoomDpRanksTable, ReplacesExpiresAndStaysBounded) {
  RoomDpRanks t(seconds(10), 3, 3);
  TimePoint t0 = now();
  t.put({1, 0}, "a", t0);
  t.put({1, 2}, "a", t0 + seconds(1));  // the same room placed again: the later one counts
  t.put({2, 1}, "a", t0 + seconds(2));
  auto found = t.find({1, 2, 9}, t0 + seconds(3));
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].room, 1u);
  EXPECT_EQ(found[0].dp_rank, 2);
  EXPECT_EQ(found[1].dp_rank, 1);
  // Past the ttl an entry is no longer answered, and a later put drops it.
  EXPECT_TRUE(t.find({1}, t0 + seconds(12)).empty());
  t.put({3, 0}, "a", t0 + seconds(12));
  EXPECT_EQ(t.size(), 1u);
  // Capacity: the oldest rooms go first.
  for (uint64_t room = 10; room < 20; ++room) t.put({room, 0}, "a", t0 + seconds(13));
  EXPECT_LE(t.size(), 3u);
  EXPECT_EQ(t.find({19}, t0 + seconds(13)).size(), 1u);
  EXPECT_TRUE(t.find({10}, t0 + seconds(13)).empty());
}

TEST(RoomDpRanksTable, ASourcePastItsShareReplacesItsOwnOldestRoom) {
  RoomDpRanks t(seconds(10), 100, 4);
  TimePoint t0 = now();
  t.put({1000, 1}, "legit", t0);
  for (uint64_t room = 1; room <= 50; ++room) t.put({room, 0}, "flood", t0);
  EXPECT_EQ(t.held_by("flood"), 4u);
  EXPECT_EQ(t.size(), 5u);
  EXPECT_EQ(t.find({47, 48, 49, 50}, t0).size(), 4u);  // its newest four
  EXPECT_TRUE(t.find({46}, t0).empty());
  ASSERT_EQ(t.find({1000}, t0).size(), 1u);
}

TEST(RoomDpRanksTable, ReRegisteringOneRoomMovesThatRoomAlone) {
  RoomDpRanks t(seconds(10), 4, 4);
  TimePoint t0 = now();
  t.put({1000, 1}, "legit", t0);
  for (int i = 0; i < 1000; ++i) t.put({7, i % 2}, "flood", t0);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.held_by("flood"), 1u);
  EXPECT_EQ(t.find({1000}, t0).size(), 1u);
}

TEST(RoomDpRanksTable, AFullTableTakesFromTheSourceHoldingTheMost) {
  // Three sources of a capacity-6 table: the ones holding most give way first.
  RoomDpRanks t(seconds(10), 6, 6);
  TimePoint t0 = now();
  t.put({1000, 1}, "legit", t0);
  for (uint64_t room = 1; room <= 5; ++room) t.put({room, 0}, "a", t0);
  for (uint64_t room = 11; room <= 30; ++room) t.put({room, 0}, "b", t0);
  EXPECT_EQ(t.size(), 6u);
  EXPECT_EQ(t.find({1000}, t0).size(), 1u);
  EXPECT_EQ(t.held_by("a") + t.held_by("b"), 5u);
  EXPECT_LE(t.held_by("a"), 3u);  // a and b end even (to within one room)
  EXPECT_LE(t.held_by("b"), 3u);
  // A room moved to another source counts against that one.
  t.put({30, 1}, "legit", t0);
  EXPECT_EQ(t.held_by("legit"), 2u);
  EXPECT_EQ(t.size(), 6u);
}

TEST(RoomDpRanksTable, ExpiredRoomsAndTheirSourcesAreForgotten) {
  RoomDpRanks t(seconds(10), 8, 8);
  TimePoint t0 = now();
  for (uint64_t room = 1; room <= 5; ++room) t.put({room, 0}, "old", t0);
  t.put({9, 0}, "new", t0 + seconds(11));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.held_by("old"), 0u);
}

class DpRankRoutesTest : public testing::LoopbackServerTest {};

TEST_F(DpRankRoutesTest, RegisteredRoomsAreAnsweredUnknownOnesLeftOut) {
  auto put =
      raw().Post("/register_dp_rank", R"({"bootstrap_room": 7, "dp_rank": 1})", "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 200);
  auto q = raw().Post("/query_dp_ranks", R"({"bootstrap_rooms": [7, 8]})", "application/json");
  ASSERT_TRUE(q);
  ASSERT_EQ(q->status, 200);
  // sglang's decode reads the answer as {str(room): rank}.
  EXPECT_EQ(json::parse(q->body), (json{{"7", 1}}));
}

TEST_F(DpRankRoutesTest, BadBodiesAre400NamingTheField) {
  auto r = raw().Post("/register_dp_rank", R"({"bootstrap_room": 7})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["field"], "dp_rank");
  auto q = raw().Post("/query_dp_ranks", R"({"rooms": [1]})", "application/json");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->status, 400);
  EXPECT_EQ(json::parse(q->body)["field"], "bootstrap_rooms");
  EXPECT_EQ(raw().Get("/query_dp_ranks")->status, 405);
}

TEST_F(DpRankRoutesTest, ARankOutsideTheRegisteredInstanceIsRefused) {
  // An instance of dp_size 2 registered: DP rank 2 names no group of it.
  BootstrapClient client("127.0.0.1", server_->port());
  ASSERT_TRUE(client.register_rank(testing::sample_registration(0), now() + seconds(5)).ok());
  auto r =
      raw().Post("/register_dp_rank", R"({"bootstrap_room": 7, "dp_rank": 2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["field"], "dp_rank");
  auto q = raw().Post("/query_dp_ranks", R"({"bootstrap_rooms": [7]})", "application/json");
  EXPECT_EQ(json::parse(q->body), json::object());
  EXPECT_NE(server_->metrics_text().find("endpoint=\"register_dp_rank\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace pdkv::bootstrap
