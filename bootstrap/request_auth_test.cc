// Signed bootstrap requests (request_auth.h): the verifier alone, then a real server on
// loopback with a cluster secret against signed, unsigned, wrongly signed and replayed
// requests.
#include "bootstrap/request_auth.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <cctype>

#include "bootstrap/client.h"
#include "bootstrap/server.h"
#include "bootstrap/test_server.h"
#include "bootstrap/test_util.h"

namespace pdkv::bootstrap {
namespace {

const ServerId kServer = random_server_id();

std::shared_ptr<const ClusterKey> key_of(uint8_t fill) {
  std::vector<uint8_t> secret(32, fill);
  auto key = ClusterKey::from_secret(secret);
  EXPECT_TRUE(key.ok());
  return *key;
}

TEST(RequestAuth, VerifiesSignedRequestsOnlyOnce) {
  auto key = key_of(1);
  RequestVerifier v(kServer);
  const int64_t t = 1'700'000'000'000;
  std::string h = sign_request(*key, kServer, "PUT", "/route", "{}", t);
  EXPECT_TRUE(v.verify(*key, h, "PUT", "/route", "{}", t + 10).ok());
  Status replay = v.verify(*key, h, "PUT", "/route", "{}", t + 20);
  EXPECT_EQ(replay.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(replay.message().find("replayed"), std::string::npos);
}

TEST(RequestAuth, RefusesTamperingStalenessOtherKeysAndGarbage) {
  auto key = key_of(1);
  RequestVerifier v(kServer);
  const int64_t t = 1'700'000'000'000;
  auto bad = [&](const std::string& header, std::string_view method, std::string_view target,
                 std::string_view body, int64_t now) {
    return v.verify(*key, header, method, target, body, now).code() == StatusCode::kUnauthenticated;
  };
  std::string h = sign_request(*key, kServer, "PUT", "/route", "{\"a\":1}", t);
  EXPECT_TRUE(bad(h, "PUT", "/route", "{\"a\":2}", t));           // body changed
  EXPECT_TRUE(bad(h, "DELETE", "/route", "{\"a\":1}", t));        // method changed
  EXPECT_TRUE(bad(h, "PUT", "/route?x=1", "{\"a\":1}", t));       // target changed
  EXPECT_TRUE(bad(h, "PUT", "/route", "{\"a\":1}", t + 31'000));  // stale
  EXPECT_TRUE(bad(h, "PUT", "/route", "{\"a\":1}", t - 31'000));  // from the future
  EXPECT_TRUE(
      bad(sign_request(*key_of(2), kServer, "PUT", "/route", "", t), "PUT", "/route", "", t));
  for (const std::string& g : std::vector<std::string>{
           "", "v1", "v2 1 00 00", "v2 x 00 00 00", "v2 1 00 00 00 00", std::string(5000, 'v'),
           "v2 1700000000000 zz " + std::string(32, '0') + " " + std::string(64, '0')}) {
    EXPECT_TRUE(bad(g, "PUT", "/route", "", t)) << g;
  }
}

TEST(RequestAuth, ANonceIsItsBytesNotItsSpelling) {
  auto key = key_of(1);
  RequestVerifier v(kServer);
  const int64_t t = 1'700'000'000'000;
  // A nonce with hex letters (a fresh one has none with odds ~3e-7; draw again).
  std::string h;
  do {
    h = sign_request(*key, kServer, "PUT", "/route", "{}", t);
  } while (h.substr(h.find(' ', 3) + 1, 32).find_first_of("abcdef") == std::string::npos);
  ASSERT_TRUE(v.verify(*key, h, "PUT", "/route", "{}", t).ok());
  std::string upper = h;
  const size_t at = h.find(' ', 3) + 1;
  for (size_t i = at; i < at + 32; ++i) upper[i] = static_cast<char>(std::toupper(upper[i]));
  ASSERT_NE(upper, h);
  Status replay = v.verify(*key, upper, "PUT", "/route", "{}", t);
  EXPECT_EQ(replay.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(replay.message().find("replayed"), std::string::npos) << replay.to_string();
}

TEST(RequestAuth, ASignatureVerifiesOnlyAtTheServerItNames) {
  auto key = key_of(1);
  const int64_t t = 1'700'000'000'000;
  RequestVerifier other(random_server_id());
  const std::string h = sign_request(*key, kServer, "PUT", "/route", "{}", t);
  Status st = other.verify(*key, h, "PUT", "/route", "{}", t);
  EXPECT_EQ(st.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(st.message().find("another bootstrap server"), std::string::npos) << st.to_string();
  // Naming the other server's id in the header does not help: the MAC covers the id.
  std::string renamed = h;
  const std::string mine = server_id_text(kServer), theirs = server_id_text(other.server());
  renamed.replace(renamed.find(mine), mine.size(), theirs);
  EXPECT_EQ(other.verify(*key, renamed, "PUT", "/route", "{}", t).message(),
            "X-Pdkv-Auth does not verify");
  EXPECT_TRUE(RequestVerifier(kServer).verify(*key, h, "PUT", "/route", "{}", t).ok());
}

TEST(RequestAuth, RememberedNoncesAreBounded) {
  auto key = key_of(1);
  RequestVerifier v(kServer, /*max_nonces=*/8);
  const int64_t t = 1'700'000'000'000;
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(
        v.verify(*key, sign_request(*key, kServer, "PUT", "/r", "", t), "PUT", "/r", "", t).ok());
  }
}

class AuthServerTest : public ::testing::Test {
 protected:
  void start(bool authenticate_reads) {
    ServerOptions o = testing::loopback_options();
    o.cluster_key = key_;
    o.authenticate_reads = authenticate_reads;
    auto s = BootstrapServer::start(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s).value();
  }
  BootstrapClient client(std::shared_ptr<const ClusterKey> key) const {
    ClientOptions o;
    o.cluster_key = std::move(key);
    return BootstrapClient("127.0.0.1", server_->port(), o);
  }
  static TimePoint soon() { return now() + std::chrono::seconds(5); }
  // The id the running server names in /health.
  ServerId server_id() const {
    httplib::Client raw("127.0.0.1", server_->port());
    auto r = raw.Get("/health");
    EXPECT_TRUE(r);
    auto id = parse_server_id(r ? r->get_header_value(kServerIdHeader) : "");
    EXPECT_TRUE(id.has_value());
    return id.value_or(ServerId{});
  }

  std::shared_ptr<const ClusterKey> key_ = key_of(1);
  std::unique_ptr<BootstrapServer> server_;
};

TEST_F(AuthServerTest, OnlyMembersWriteRoutesAndReadsStayOpenByDefault) {
  start(false);
  Status stranger = client(nullptr).register_rank(testing::sample_registration(0), soon());
  EXPECT_EQ(stranger.code(), StatusCode::kUnauthenticated) << stranger.to_string();
  Status other = client(key_of(2)).register_rank(testing::sample_registration(0), soon());
  EXPECT_EQ(other.code(), StatusCode::kUnauthenticated) << other.to_string();
  EXPECT_EQ(server_->table().size(), 0u);
  ASSERT_TRUE(client(key_).register_rank(testing::sample_registration(0), soon()).ok());
  EXPECT_EQ(server_->table().size(), 1u);
  // Reads are open: a keyless client finds the route.
  EXPECT_TRUE(client(nullptr).parallel_info(soon()).ok());
  // A stranger cannot delete it; a member can.
  EXPECT_EQ(client(nullptr).deregister(0, 0).code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(server_->table().size(), 1u);
  EXPECT_TRUE(client(key_).deregister(0, 0).ok());
  EXPECT_NE(server_->metrics_text().find("pdkv_bootstrap_errors_total{kind=\"unauthorized\"} 3"),
            std::string::npos)
      << server_->metrics_text();
}

TEST_F(AuthServerTest, ACapturedRequestCannotBeReplayed) {
  start(false);
  std::string header = sign_request(*key_, server_id(), "DELETE",
                                    "/route?engine_rank=0&target_dp_group=0", "", unix_now_ms());
  httplib::Client raw("127.0.0.1", server_->port());
  httplib::Headers h{{kAuthHeader, header}};
  ASSERT_TRUE(client(key_).register_rank(testing::sample_registration(0), soon()).ok());
  auto first = raw.Delete("/route?engine_rank=0&target_dp_group=0", h);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  ASSERT_TRUE(client(key_).register_rank(testing::sample_registration(0), soon()).ok());
  auto replay = raw.Delete("/route?engine_rank=0&target_dp_group=0", h);
  ASSERT_TRUE(replay);
  EXPECT_EQ(replay->status, 401);
  EXPECT_EQ(server_->table().size(), 1u);
}

TEST_F(AuthServerTest, AClientSignsForTheServerAgainAfterItRestarts) {
  start(true);
  const BootstrapClient member = client(key_);
  ASSERT_TRUE(member.register_rank(testing::sample_registration(0), soon()).ok());
  const ServerId before = server_id();
  const int port = server_->port();
  server_.reset();
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.cluster_key = key_;
  o.authenticate_reads = true;
  auto s = BootstrapServer::start(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  server_ = std::move(s).value();
  EXPECT_NE(server_id(), before);
  // The same client, still holding the old id: its first try is refused (401 naming the new
  // id) and signed again at once.
  Status again = member.register_rank(testing::sample_registration(0), soon());
  EXPECT_TRUE(again.ok()) << again.to_string();
  EXPECT_TRUE(member.parallel_info(soon()).ok());
}

TEST_F(AuthServerTest, AuthenticatedReadsRefuseStrangers) {
  start(true);
  ASSERT_TRUE(client(key_).register_rank(testing::sample_registration(0), soon()).ok());
  EXPECT_EQ(client(nullptr).parallel_info(soon()).status().code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(client(key_).parallel_info(soon()).ok());
}

}  // namespace
}  // namespace pdkv::bootstrap
