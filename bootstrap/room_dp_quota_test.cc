// The DP placement table under a flood from another client address, over real sockets: a
// BootstrapServer on loopback, the legitimate prefill on 127.0.0.1 and the flooder on
// 127.0.0.2 (any 127.x.y.z is this host on Linux, each a source address of its own).
// Without a cluster secret anyone may POST /register_dp_rank; what holds the decode's
// placement is the per-source share of the table (room_dp_ranks.h).
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "bootstrap/server.h"
#include "bootstrap/test_server.h"
#include "http/testing/raw_http_client.h"

namespace pdkv::bootstrap {
namespace {

using http::testing::RawConnection;
using nlohmann::json;
using std::chrono::milliseconds;

constexpr size_t kCapacity = 64;  // so a few thousand requests are a flood of it
constexpr uint64_t kLegitRoom = 0x5eed0001;
constexpr int kLegitDpRank = 1;

std::string post(std::string_view path, const std::string& body) {
  return "POST " + std::string(path) +
         " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string registration(uint64_t room, int dp_rank) {
  return json{{"bootstrap_room", room}, {"dp_rank", dp_rank}}.dump();
}

class DpPlacementFloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o = testing::loopback_options();
    o.dp_placement_capacity = kCapacity;
    auto s = BootstrapServer::start(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s).value();
  }

  // One request on `c`, keep-alive; the reply's status (0 or -1 if none came).
  int send(RawConnection& c, std::string_view path, const std::string& body) {
    if (!c.send_all(post(path, body))) return 0;
    return c.read_reply(milliseconds(5000)).status;
  }

  // The legitimate placement registered from 127.0.0.1, as the prefill does.
  void register_legit() {
    RawConnection c(server_->port(), "127.0.0.1");
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(send(c, "/register_dp_rank", registration(kLegitRoom, kLegitDpRank)), 200);
  }

  // What the decode reads for the legitimate room: its DP rank, or null if unknown.
  json legit_answer() {
    RawConnection c(server_->port(), "127.0.0.1");
    EXPECT_TRUE(c.ok());
    c.send_all(post("/query_dp_ranks", json{{"bootstrap_rooms", {kLegitRoom}}}.dump()));
    auto reply = c.read_reply(milliseconds(5000));
    EXPECT_EQ(reply.status, 200);
    json answer = json::parse(reply.body, nullptr, false);
    std::string key = std::to_string(kLegitRoom);
    return answer.is_object() && answer.contains(key) ? answer[key] : json();
  }

  std::unique_ptr<BootstrapServer> server_;
};

TEST_F(DpPlacementFloodTest, FreshRoomsFromAnotherAddressDoNotEvictTheLegitPlacement) {
  register_legit();
  RawConnection flood(server_->port(), "127.0.0.2");
  ASSERT_TRUE(flood.ok());
  // Sixty-four times the whole table, every one accepted: the flooder is not refused, it
  // only replaces its own oldest rooms.
  for (uint64_t room = 1; room <= 64 * kCapacity; ++room) {
    ASSERT_EQ(send(flood, "/register_dp_rank", registration(room, 0)), 200) << room;
  }
  EXPECT_EQ(legit_answer(), json(kLegitDpRank));
}

TEST_F(DpPlacementFloodTest, OneRoomReRegisteredEndlesslyDoesNotChurnOthers) {
  register_legit();
  RawConnection flood(server_->port(), "127.0.0.2");
  ASSERT_TRUE(flood.ok());
  for (size_t i = 0; i < 64 * kCapacity; ++i) {
    ASSERT_EQ(send(flood, "/register_dp_rank", registration(42, static_cast<int>(i % 2))), 200);
  }
  EXPECT_EQ(legit_answer(), json(kLegitDpRank));
}

TEST_F(DpPlacementFloodTest, AFloodersOwnRoomsAreBoundedByItsShare) {
  RawConnection flood(server_->port(), "127.0.0.2");
  ASSERT_TRUE(flood.ok());
  for (uint64_t room = 1; room <= 4 * kCapacity; ++room) {
    ASSERT_EQ(send(flood, "/register_dp_rank", registration(room, 0)), 200);
  }
  // Its share is an eighth of the table: its newest rooms are kept, its oldest dropped.
  json rooms = json::array();
  for (uint64_t room = 1; room <= 4 * kCapacity; ++room) rooms.push_back(room);
  ASSERT_TRUE(flood.send_all(post("/query_dp_ranks", json{{"bootstrap_rooms", rooms}}.dump())));
  auto reply = flood.read_reply(milliseconds(5000));
  ASSERT_EQ(reply.status, 200);
  json answer = json::parse(reply.body);
  EXPECT_EQ(answer.size(), kCapacity / 8);
  EXPECT_TRUE(answer.contains(std::to_string(4 * kCapacity)));
  EXPECT_FALSE(answer.contains("1"));
}

}  // namespace
}  // namespace pdkv::bootstrap
