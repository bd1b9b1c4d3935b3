#include "engine/testing/peer_commands.h"

#include <gtest/gtest.h>

namespace pdkv::engine::testing {
namespace {

TEST(PeerCommandsTest, ParsesEveryVerb) {
  EXPECT_EQ(parse_peer_command("PING")->verb, PeerVerb::kPing);
  EXPECT_EQ(parse_peer_command("HASH")->verb, PeerVerb::kHash);
  EXPECT_EQ(parse_peer_command("UNREG")->verb, PeerVerb::kUnregister);
  EXPECT_EQ(parse_peer_command("QUIT")->verb, PeerVerb::kQuit);
  EXPECT_EQ(parse_peer_command("EXIT")->verb, PeerVerb::kQuit);
  Result<PeerCommand> grant = parse_peer_command("GRANT 11 131072 65536");
  ASSERT_TRUE(grant.ok()) << grant.status().to_string();
  EXPECT_EQ(grant->verb, PeerVerb::kGrant);
  EXPECT_EQ(grant->id, 11u);
  EXPECT_EQ(grant->offset, 131072u);
  EXPECT_EQ(grant->length, 65536u);
  Result<PeerCommand> revoke = parse_peer_command("REVOKE 18446744073709551615");
  ASSERT_TRUE(revoke.ok()) << revoke.status().to_string();
  EXPECT_EQ(revoke->verb, PeerVerb::kRevoke);
  EXPECT_EQ(revoke->id, UINT64_MAX);
  Result<PeerCommand> push = parse_peer_command("PUSH 127.0.0.1:4000 140000 4096 3");
  ASSERT_TRUE(push.ok()) << push.status().to_string();
  EXPECT_EQ(push->verb, PeerVerb::kPush);
  EXPECT_EQ(push->endpoint, "127.0.0.1:4000");
  EXPECT_EQ(push->dst, 140000u);
  EXPECT_EQ(push->length, 4096u);
  EXPECT_EQ(push->rounds, 3u);
}

TEST(PeerCommandsTest, ToleratesRepeatedSpaces) {
  Result<PeerCommand> grant = parse_peer_command("  GRANT  1 2   3 ");
  ASSERT_TRUE(grant.ok()) << grant.status().to_string();
  EXPECT_EQ(grant->offset, 2u);
  EXPECT_EQ(grant->length, 3u);
}

TEST(PeerCommandsTest, RefusesWrongArgumentCounts) {
  for (const char* line : {"GRANT 1 2", "GRANT 1 2 3 4", "REVOKE", "REVOKE 1 2", "PING 1",
                           "QUIT now", "PUSH 127.0.0.1:1 2 3", "PUSH 127.0.0.1:1 2 3 4 5"}) {
    Result<PeerCommand> c = parse_peer_command(line);
    ASSERT_FALSE(c.ok()) << line;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << line;
    EXPECT_NE(c.status().message().find("argument"), std::string::npos) << c.status().message();
  }
}

TEST(PeerCommandsTest, RefusesNumbersThatAreNotDecimalUint64) {
  for (const char* line :
       {"REVOKE -1", "REVOKE +1", "REVOKE 0x10", "REVOKE 1a", "REVOKE 18446744073709551616",
        "GRANT 1 2 x", "PUSH 127.0.0.1:1 2 x 4"}) {
    Result<PeerCommand> c = parse_peer_command(line);
    ASSERT_FALSE(c.ok()) << line;
    EXPECT_NE(c.status().message().find("decimal uint64"), std::string::npos)
        << c.status().message();
  }
}

TEST(PeerCommandsTest, RefusesUnknownAndEmptyLines) {
  EXPECT_FALSE(parse_peer_command("").ok());
  EXPECT_FALSE(parse_peer_command("   ").ok());
  EXPECT_FALSE(parse_peer_command("grant 1 2 3").ok());  // verbs are upper case
  Result<PeerCommand> c = parse_peer_command("FLY 1");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unknown"), std::string::npos);
}

TEST(PeerCommandsTest, FormatRoundTrips) {
  EXPECT_EQ(format_peer_command(grant_command(11, 0, 65536)), "GRANT 11 0 65536");
  EXPECT_EQ(format_peer_command(revoke_command(11)), "REVOKE 11");
  for (PeerCommand c :
       {grant_command(1, 2, 3), revoke_command(UINT64_MAX), push_command("[::1]:9", 7, 8, 9),
        PeerCommand{PeerVerb::kHash}, PeerCommand{PeerVerb::kUnregister},
        PeerCommand{PeerVerb::kPing}, PeerCommand{PeerVerb::kQuit}}) {
    Result<PeerCommand> back = parse_peer_command(format_peer_command(c));
    ASSERT_TRUE(back.ok()) << format_peer_command(c);
    EXPECT_EQ(back->verb, c.verb);
    EXPECT_EQ(back->id, c.id);
    EXPECT_EQ(back->offset, c.offset);
    EXPECT_EQ(back->length, c.length);
    EXPECT_EQ(back->endpoint, c.endpoint);
    EXPECT_EQ(back->dst, c.dst);
    EXPECT_EQ(back->rounds, c.rounds);
  }
}

}  // namespace
}  // namespace pdkv::engine::testing
