// The path table's ranking and reasons, and the path channel's strict decoders.
#include "engine/path/path_table.h"

#include <gtest/gtest.h>

#include "engine/path/path_messages.h"

namespace pdkv::engine {
namespace {

BackendCapabilities caps(std::string_view name, DeviceSupport device) {
  BackendCapabilities c;
  c.name = name;
  c.device_source = device;
  c.device_destination = device;
  return c;
}

struct Fixture {
  std::vector<LocalBackend> local = {{"tcp", caps("tcp", DeviceSupport::kStaged)},
                                     {"shm", caps("shm", DeviceSupport::kNone)}};
  std::vector<PathOffer> peer = {{"tcp", "h:1", true}, {"shm", "h:2", false}};
  std::vector<std::pair<std::string_view, std::string>> unavailable = {{"ucx", "not built"}};
  PathInputs inputs(bool same_host, bool ptrace, bool device_src, bool device_dst) {
    return PathInputs{LocalityVerdict{same_host, ptrace, same_host ? "no ptrace" : "other host"},
                      device_src,
                      device_dst,
                      local,
                      peer,
                      unavailable};
  }
};

TEST(PathTable, RanksShmFirstOnOneHost) {
  Fixture f;
  auto d = choose_path(f.inputs(true, true, false, false), std::nullopt);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->path, PathKind::kShm);
  EXPECT_EQ(d->why, "");
}

TEST(PathTable, NamesEveryFasterPathItCouldNotTake) {
  Fixture f;
  auto d = choose_path(f.inputs(false, false, false, false), std::nullopt);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->path, PathKind::kTcp);
  EXPECT_EQ(d->why, "shm: other host; ucx: not built");
}

TEST(PathTable, DeviceMemoryTakesTcpStagedNeverShm) {
  Fixture f;
  auto d = choose_path(f.inputs(true, true, true, false), std::nullopt);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->path, PathKind::kTcpStaged);
  EXPECT_NE(d->why.find("shm: the sources are device memory"), std::string::npos);
  auto dst = choose_path(f.inputs(true, true, false, true), std::nullopt);
  ASSERT_TRUE(dst.ok());
  EXPECT_EQ(dst->path, PathKind::kTcpStaged);
}

TEST(PathTable, FloorRefusesSlowerPaths) {
  Fixture f;
  auto d = choose_path(f.inputs(false, false, false, false), PathKind::kShm);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("below the required shm"), std::string::npos);
  EXPECT_TRUE(choose_path(f.inputs(true, true, false, false), PathKind::kShm).ok());
}

TEST(PathTable, NoCommonBackendIsAnError) {
  Fixture f;
  f.peer = {{"ucx", "h:3", false}};
  auto d = choose_path(f.inputs(false, false, false, false), std::nullopt);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("tcp: the peer does not offer it"), std::string::npos);
}

TEST(PathMessages, HelloRoundTripsAndRejectsMalformedInput) {
  PathHello h;
  h.endpoint = "10.0.0.1:5000";
  h.locality = {"boot", 11, 12, 13};
  h.challenge.fill(7);
  h.proof_addr = 0x1000;
  h.device_destinations = true;
  h.offers = {{"tcp", "10.0.0.1:5001", true}, {"shm", "10.0.0.1:5002", false}};
  std::vector<uint8_t> bytes;
  encode_path_hello(h, &bytes);
  auto back = decode_path_hello(bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->offers, h.offers);
  EXPECT_EQ(back->locality, h.locality);
  EXPECT_EQ(back->challenge, h.challenge);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(decode_path_hello(std::span(bytes).first(cut)).ok()) << cut;
  }
  auto trailing = bytes;
  trailing.push_back(0);
  EXPECT_FALSE(decode_path_hello(trailing).ok());
  auto other_version = bytes;
  other_version[0] = 9;
  EXPECT_FALSE(decode_path_hello(other_version).ok());
}

TEST(PathMessages, ChoiceRejectsUnknownPaths) {
  std::vector<uint8_t> bytes;
  encode_path_choice({PathKind::kShm, "why"}, &bytes);
  ASSERT_TRUE(decode_path_choice(bytes).ok());
  bytes[0] = 5;
  EXPECT_FALSE(decode_path_choice(bytes).ok());
}

}  // namespace
}  // namespace pdkv::engine
