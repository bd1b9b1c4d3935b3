// Lease message payloads (messages.h): each type survives encode -> decode, and each
// decoder refuses short, trailing, miscounted or out-of-range input with DataLoss.
#include "engine/lease/messages.h"

#include <gtest/gtest.h>

#include <climits>
#include <vector>

#include "engine/lease/wire.h"

namespace pdkv::engine::lease {
namespace {

template <typename M, typename Encode>
std::vector<uint8_t> encoded(const M& m, Encode encode) {
  std::vector<uint8_t> out;
  encode(m, &out);
  return out;
}

TEST(LeaseMessages, HelloAndHelloAckRoundTrip) {
  auto hello = decode_hello(encoded(Hello{"ucx", "boot/ns"}, encode_hello));
  ASSERT_TRUE(hello.ok()) << hello.status().to_string();
  EXPECT_EQ(hello->backend, "ucx");
  EXPECT_EQ(hello->host_identity, "boot/ns");
  HelloAck a{true, "", 1234, "boot/ns", 5000, std::string("\0\1\2", 3)};
  auto ack = decode_hello_ack(encoded(a, encode_hello_ack));
  ASSERT_TRUE(ack.ok()) << ack.status().to_string();
  EXPECT_TRUE(ack->ok);
  EXPECT_EQ(ack->pid, 1234u);
  EXPECT_EQ(ack->lease_ms, 5000u);
  EXPECT_EQ(ack->extra, a.extra);
}

TEST(LeaseMessages, LeaseEncodesLittleEndianAndRoundTrips) {
  const uint64_t ranges[] = {0x1122334455667788, 4096, 0xabcdef};  // dst, length, grant
  std::vector<uint8_t> p;
  encode_lease(0x0102, ranges, &p);
  ASSERT_EQ(p.size(), 8u + 4 + 24);
  EXPECT_EQ(p[0], 0x02);
  EXPECT_EQ(p[1], 0x01);
  EXPECT_EQ(p[8], 1);  // count
  EXPECT_EQ(p[12], 0x88);
  auto d = decode_lease(p);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->part_id, 0x0102u);
  ASSERT_EQ(d->ranges.size(), 1u);
  EXPECT_EQ(d->ranges[0].addr, ranges[0]);
  EXPECT_EQ(d->ranges[0].length, 4096u);
  EXPECT_EQ(d->ranges[0].grant, 0xabcdefu);
}

TEST(LeaseMessages, LeaseCountMustMatchTheBytesPresent) {
  std::vector<uint8_t> p;
  Writer w(p);
  w.u64(1);
  w.u32(0xffffffff);  // would be 64 GiB of ranges: refused before allocating
  w.u64(0);
  w.u64(1);
  EXPECT_EQ(decode_lease(p).status().code(), StatusCode::kDataLoss);
}

TEST(LeaseMessages, GrantRoundTripsAndRejectsAFlagOtherThanZeroOrOne) {
  Grant g{7, false, 3, 0xabc, 9, "not registered"};
  auto p = encoded(g, encode_grant);
  auto d = decode_grant(p);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->part_id, 7u);
  EXPECT_FALSE(d->ok);
  EXPECT_EQ(d->bad_index, 3u);
  EXPECT_EQ(d->first_bad, 0xabcu);
  EXPECT_EQ(d->regions_epoch, 9u);
  EXPECT_EQ(d->message, "not registered");
  p[8] = 2;
  EXPECT_EQ(decode_grant(p).status().code(), StatusCode::kDataLoss);
}

TEST(LeaseMessages, TrailingBytesAreDataLoss) {
  auto hello = encoded(Hello{"shm", "id"}, encode_hello);
  hello.push_back(0);
  EXPECT_EQ(decode_hello(hello).status().code(), StatusCode::kDataLoss);
  std::vector<uint8_t> done;
  encode_part_id(5, &done);
  ASSERT_TRUE(decode_part_id(done).ok());
  done.push_back(0);
  EXPECT_EQ(decode_part_id(done).status().code(), StatusCode::kDataLoss);
  done.resize(7);
  EXPECT_EQ(decode_part_id(done).status().code(), StatusCode::kDataLoss);
}

TEST(LeaseMessages, HelloAckLeaseBeyondIntIsDataLoss) {
  HelloAck a{true, "", 1, "id", static_cast<uint32_t>(INT_MAX) + 1u, ""};
  EXPECT_EQ(decode_hello_ack(encoded(a, encode_hello_ack)).status().code(), StatusCode::kDataLoss);
}

TEST(LeaseMessages, RegionTableRoundTripsAndRefusesAnInflatedCount) {
  RegionTable t{3, {{0x1000, 4096, "k1"}, {0x9000, 64, "k2"}}};
  auto p = encoded(t, encode_regions);
  auto d = decode_regions(p);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->epoch, 3u);
  ASSERT_EQ(d->regions.size(), 2u);
  EXPECT_EQ(d->regions[0].rkey, "k1");
  EXPECT_EQ(d->regions[1].addr, 0x9000u);
  p[8] = 0xff;  // n = 255 regions in 48 bytes
  EXPECT_EQ(decode_regions(p).status().code(), StatusCode::kDataLoss);
}

// ucp_ep_rkey_unpack() takes no length, so the table bounds each rkey before UCX sees it.
TEST(LeaseMessages, RegionTableRefusesAnEmptyOrOversizedRkey) {
  for (size_t n : {size_t{0}, kMaxPackedRkeyBytes + 1}) {
    RegionTable t{1, {{0x1000, 4096, std::string(n, 'k')}}};
    EXPECT_EQ(decode_regions(encoded(t, encode_regions)).status().code(), StatusCode::kDataLoss)
        << n << " bytes";
  }
  RegionTable largest{1, {{0x1000, 4096, std::string(kMaxPackedRkeyBytes, 'k')}}};
  EXPECT_TRUE(decode_regions(encoded(largest, encode_regions)).ok());
}

TEST(LeaseMessages, AuthBodiesAreExactAndRefusalsBounded) {
  std::vector<uint8_t> nonce(32, 7), out(32);
  ASSERT_TRUE(decode_auth_body(nonce, out).ok());
  EXPECT_EQ(out, nonce);
  nonce.push_back(0);
  EXPECT_EQ(decode_auth_body(nonce, out).code(), StatusCode::kDataLoss);
  nonce.resize(31);
  EXPECT_EQ(decode_auth_body(nonce, out).code(), StatusCode::kDataLoss);

  std::vector<uint8_t> refusal;
  encode_auth_refused("no secret here", &refusal);
  auto reason = decode_auth_refused(refusal);
  ASSERT_TRUE(reason.ok()) << reason.status().to_string();
  EXPECT_EQ(*reason, "no secret here");
  refusal.push_back(0);
  EXPECT_EQ(decode_auth_refused(refusal).status().code(), StatusCode::kDataLoss);
  std::vector<uint8_t> long_refusal;
  encode_auth_refused(std::string(kMaxRefusalBytes + 100, 'x'), &long_refusal);
  auto cut = decode_auth_refused(long_refusal);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->size(), kMaxRefusalBytes);
  std::vector<uint8_t> oversized;
  Writer(oversized).bytes(std::string(kMaxRefusalBytes + 1, 'x'));
  EXPECT_EQ(decode_auth_refused(oversized).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pdkv::engine::lease
