// Real HTTP over loopback: an embedded BootstrapServer on port 0, the BootstrapClient and
// raw cpp-httplib requests.
#include "bootstrap/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "bootstrap/client.h"
#include "bootstrap/test_server.h"
#include "bootstrap/test_util.h"

namespace pdkv::bootstrap {
namespace {

using nlohmann::json;
using testing::sample_json;
using testing::sample_registration;

class ServerTest : public testing::LoopbackServerTest {
 protected:
  BootstrapClient client() const { return BootstrapClient("127.0.0.1", server_->port()); }
  static TimePoint soon(int ms = 5000) { return now() + std::chrono::milliseconds(ms); }
  // Returns (status, error field) of a PUT with `body`.
  std::pair<int, std::string> put(const std::string& body) {
    auto r = raw().Put("/route", body, "application/json");
    if (!r) return {0, ""};
    json j = json::parse(r->body, nullptr, false);
    std::string field = j.is_object() && j.contains("field") ? j["field"].get<std::string>() : "";
    return {r->status, field};
  }
};

TEST_F(ServerTest, QueryBeforeRegistrationIs404) {
  auto r = raw().Get("/route?engine_rank=-1&target_dp_group=-1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("no prefill rank"), std::string::npos);
  // The client keeps retrying a 404 until its deadline.
  auto info = client().parallel_info(soon(200));
  EXPECT_EQ(info.status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(ServerTest, RegisterThenLookUp) {
  ASSERT_TRUE(client().register_rank(sample_registration(3), soon()).ok());
  auto info = client().parallel_info(soon());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(*info, sample_registration(3).layout);
  // engine_rank 3 of world 4, dp 2 -> group 1, tp rank 1.
  auto ep = client().rank(1, 1, soon());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  EXPECT_EQ(ep->rank_ip, "127.0.0.1");
  EXPECT_EQ(ep->rank_port, 30003);
  auto missing = raw().Get("/route?engine_rank=0&target_dp_group=1");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(raw().Get("/route?engine_rank=5&target_dp_group=1")->status, 400);
  EXPECT_EQ(raw().Get("/route?engine_rank=0&target_dp_group=9")->status, 400);
}

TEST_F(ServerTest, PipelineStagesHaveTablesOfTheirOwn) {
  // Stage 0 holds two KV buffers, stage 1 one: their layouts differ and both register.
  auto first = sample_registration(3);
  first.layout.pp_size = 2;
  auto second = first;
  second.pp_rank = 1;
  second.rank_port = 31003;
  second.layout.kv_item_lens = {4096};
  second.layout.kv_unit_lens = {256};
  ASSERT_TRUE(client().register_rank(first, soon()).ok());
  ASSERT_TRUE(client().register_rank(second, soon()).ok());
  ClientOptions later;
  later.pp_rank = 1;
  const BootstrapClient stage_one("127.0.0.1", server_->port(), later);
  auto info = stage_one.parallel_info(soon());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(*info, second.layout);
  EXPECT_EQ(client().parallel_info(soon())->kv_item_lens, first.layout.kv_item_lens);
  EXPECT_EQ(stage_one.rank(1, 1, soon())->rank_port, 31003);
  EXPECT_EQ(client().rank(1, 1, soon())->rank_port, 30003);
  EXPECT_EQ(raw().Get("/route?engine_rank=1&target_dp_group=1&target_pp_rank=2")->status, 404);
  EXPECT_EQ(raw().Get("/route?engine_rank=1&target_dp_group=1&target_pp_rank=64")->status, 400);
  // Every stage names the same stage count, and a stage outside it is refused.
  auto other_count = second;
  other_count.layout.pp_size = 3;
  EXPECT_EQ(put(registration_to_json(other_count)), std::make_pair(409, std::string("pp_size")));
  auto outside = first;
  outside.pp_rank = 2;
  EXPECT_EQ(put(registration_to_json(outside)), std::make_pair(400, std::string("pp_rank")));
  ASSERT_TRUE(stage_one.deregister(1, 1).ok());
  EXPECT_EQ(client().rank(1, 1, soon())->rank_port, 30003);  // stage 0's rank stays
}

TEST_F(ServerTest, LookupSucceedsOnceTheRankRegistersLater) {
  ASSERT_TRUE(client().register_rank(sample_registration(0), soon()).ok());
  std::thread late([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the rank is "slow"
    ASSERT_TRUE(client().register_rank(sample_registration(1), soon()).ok());
  });
  auto group = client().group(0, soon(10000));
  late.join();
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  ASSERT_EQ(group->size(), 2u);
  EXPECT_EQ((*group)[1].rank_port, 30001);
}

TEST_F(ServerTest, ReRegistrationReplaces) {
  auto reg = sample_registration(2);
  ASSERT_TRUE(client().register_rank(reg, soon()).ok());
  reg.rank_port = 31111;
  ASSERT_TRUE(client().register_rank(reg, soon()).ok());
  EXPECT_EQ(client().rank(1, 0, soon())->rank_port, 31111);
  EXPECT_EQ(server_->table().size(), 1u);
}

TEST_F(ServerTest, ConflictingLayoutIs409AndChangesNothing) {
  ASSERT_TRUE(client().register_rank(sample_registration(0), soon()).ok());
  auto other = sample_registration(1);
  other.layout.page_layout = "HND";
  Status st = client().register_rank(other, soon());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("page_layout"), std::string::npos) << st.message();
  auto [code, field] = put(registration_to_json(other));
  EXPECT_EQ(code, 409);
  EXPECT_EQ(server_->table().size(), 1u);
  EXPECT_EQ(client().parallel_info(soon())->page_layout, "NHD");
}

TEST_F(ServerTest, MalformedBodiesAre400NamingTheFieldAndStoreNothing) {
  std::vector<std::pair<json, std::string>> cases;
  for (const char* f : {"role", "world_size", "engine_rank", "rank_ip", "rank_port", "kv_item_lens",
                        "enable_mla_l1_5_cache"}) {
    json j = sample_json();
    j.erase(f);
    cases.emplace_back(j, f);
  }
  json j = sample_json();
  j["world_size"] = "4";
  cases.emplace_back(j, "world_size");
  j = sample_json();
  j["rank_port"] = -5;
  cases.emplace_back(j, "rank_port");
  j = sample_json();
  j["engine_rank"] = 99;
  cases.emplace_back(j, "engine_rank");
  for (const auto& [body, field] : cases) {
    auto [code, got] = put(body.dump());
    EXPECT_EQ(code, 400) << field;
    EXPECT_EQ(got, field);
  }
  EXPECT_EQ(put("{oops").second, "body");
  EXPECT_EQ(server_->table().size(), 0u);
  Status st = client().register_rank(
      [] {
        auto r = sample_registration(0);
        r.rank_port = 0;
        return r;
      }(),
      soon());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank_port"), std::string::npos);
}

TEST_F(ServerTest, OversizedBodyIs400NamingTheBody) {
  json j = sample_json();
  j["padding"] = std::string(kMaxBodyBytes + 10, 'x');
  auto [code, field] = put(j.dump());
  EXPECT_EQ(code, 400);
  EXPECT_EQ(field, "body");
  EXPECT_EQ(server_->table().size(), 0u);
}

TEST_F(ServerTest, BadQueriesAndMethods) {
  EXPECT_EQ(raw().Get("/route?engine_rank=0")->status, 400);
  EXPECT_EQ(raw().Get("/route?engine_rank=x&target_dp_group=0")->status, 400);
  EXPECT_EQ(raw().Post("/route", "{}", "application/json")->status, 405);
  auto r = raw().Get("/nowhere");
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(json::parse(r->body, nullptr, false).contains("error"));
}

TEST_F(ServerTest, Deregister) {
  ASSERT_TRUE(client().register_rank(sample_registration(1), soon()).ok());
  EXPECT_TRUE(client().deregister(0, 1).ok());
  EXPECT_EQ(client().deregister(0, 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(server_->table().size(), 0u);
}

TEST_F(ServerTest, ConcurrentRegistrationsFromManyRanks) {
  constexpr int kWorld = 32;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      for (int round = 0; round < 3; ++round) {  // re-registrations race too
        if (!client().register_rank(sample_registration(r, kWorld, 4), soon(20000)).ok()) {
          failures++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(server_->table().size(), static_cast<size_t>(kWorld));
  for (int g = 0; g < 4; ++g) {
    auto group = client().group(g, soon());
    ASSERT_TRUE(group.ok()) << group.status().to_string();
    for (int t = 0; t < 8; ++t) EXPECT_EQ((*group)[t].rank_port, 30000 + g * 8 + t);
  }
}

TEST_F(ServerTest, HealthAndMetrics) {
  EXPECT_TRUE(client().health(std::chrono::milliseconds(2000)).ok());
  ASSERT_TRUE(client().register_rank(sample_registration(0), soon()).ok());
  put("{bad");
  raw().Get("/route?engine_rank=1&target_dp_group=0");  // 404
  auto r = raw().Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  const std::string& m = r->body;
  EXPECT_NE(m.find("# TYPE pdkv_bootstrap_registered_ranks gauge\n"
                   "pdkv_bootstrap_registered_ranks 1\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("pdkv_bootstrap_requests_total{endpoint=\"route_put\"} 2\n"), std::string::npos);
  EXPECT_NE(m.find("pdkv_bootstrap_requests_total{endpoint=\"health\"} 1\n"), std::string::npos);
  EXPECT_NE(m.find("pdkv_bootstrap_errors_total{kind=\"bad_request\"} 1\n"), std::string::npos);
  EXPECT_NE(m.find("pdkv_bootstrap_errors_total{kind=\"not_found\"} 1\n"), std::string::npos);
  // Every non-comment line is "name{labels} value" (Prometheus text format 0.0.4).
  std::istringstream lines(m);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    EXPECT_NO_THROW((void)std::stod(line.substr(sp + 1))) << line;
    EXPECT_EQ(line.rfind("pdkv_bootstrap_", 0), 0u) << line;
  }
}

TEST_F(ServerTest, HealthOfAStoppedServerIsUnavailable) {
  int port = server_->port();
  server_->stop();
  BootstrapClient c("127.0.0.1", port);
  EXPECT_EQ(c.health(std::chrono::milliseconds(500)).code(), StatusCode::kUnavailable);
  auto start = now();
  Status st = c.register_rank(sample_registration(0), soon(300));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(elapsed_ms(start), 2000);
}

TEST(ClientAddressTest, ParsesHostPort) {
  EXPECT_EQ(BootstrapClient::from_address("10.0.0.1:8998")->port(), 8998);
  EXPECT_EQ(BootstrapClient::from_address("[::1]:80")->host(), "::1");
  EXPECT_FALSE(BootstrapClient::from_address("nohost").ok());
  EXPECT_FALSE(BootstrapClient::from_address("h:99999").ok());
}

}  // namespace
}  // namespace pdkv::bootstrap

namespace pdkv::bootstrap {
namespace {

TEST(BootstrapServerPort, ASecondServerOnTheSamePortIsRefusedNotSharingIt) {
  // With SO_REUSEPORT both would bind and split the requests (and the routes) between them.
  ServerOptions o = testing::loopback_options();
  auto first = BootstrapServer::start(o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  o.port = (*first)->port();
  auto second = BootstrapServer::start(o);
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace pdkv::bootstrap
