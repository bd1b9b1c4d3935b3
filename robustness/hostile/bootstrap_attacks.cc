#include "robustness/hostile/bootstrap_attacks.h"

#include <httplib.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/client.h"
#include "bootstrap/request_auth.h"
#include "common/clock.h"
#include "common/host_port.h"
#include "common/mutex.h"

namespace pdkv::hostile {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kDeadline{3000};
constexpr milliseconds kHealthTimeout{2000};
constexpr milliseconds kHealthPeriod{20};

std::string route_text(const Result<bootstrap::RankEndpoint>& e) {
  if (!e.ok()) return e.status().to_string();
  return e->rank_ip + ":" + std::to_string(e->rank_port);
}

}  // namespace

json route_poison(const AttackOptions& o) {
  json report{{"attack", "route_poison"}};
  bootstrap::ClientOptions co;
  co.cluster_key = o.key;
  auto client = bootstrap::BootstrapClient::from_address(o.bootstrap, co);
  if (!client.ok()) {
    report["error"] = client.status().to_string();
    return report;
  }
  auto layout = client->parallel_info(now() + kDeadline);
  if (!layout.ok()) {
    report["error"] = "cannot read the layout: " + layout.status().to_string();
    return report;
  }
  const std::string before = route_text(client->rank(0, 0, now() + kDeadline));
  bootstrap::PrefillRegistration reg;
  reg.engine_rank = 0;
  reg.layout = *layout;
  json attempts = json::object();
  bool any_accepted = false;
  auto attempt = [&](const std::string& name, const Status& st) {
    attempts[name] = st.ok() ? "OK" : st.to_string();
    any_accepted = any_accepted || st.ok();
  };
  if (!o.malformed_only) {
    reg.rank_ip = "127.0.0.1";
    reg.rank_port = o.first_port;
    attempt("put_route", client->register_rank(reg, now() + kDeadline));
  }
  reg.rank_port = o.first_port;
  reg.rank_ip = "*";
  attempt("put_wildcard_ip", client->register_rank(reg, now() + kDeadline));
  reg.rank_ip = "127.0.0.1:1";
  attempt("put_host_port_ip", client->register_rank(reg, now() + kDeadline));
  // A valid address, then a NUL: a check that reads the address as a C string stops at
  // the NUL and passes it, and the server would store and serve the whole string.
  using namespace std::string_literals;
  for (const auto& [name, ip] :
       {std::pair{"put_ip_nul_evil", "127.0.0.1\0evil"s}, std::pair{"put_ip_nul", "127.0.0.1\0"s},
        std::pair{"put_ipv6_nul_x", "::1\0x"s}, std::pair{"put_host_name_nul", "localhost\0"s}}) {
    reg.rank_ip = ip;
    attempt(name, client->register_rank(reg, now() + kDeadline));
  }
  if (!o.malformed_only) attempt("delete_route", client->deregister(0, 0));
  const std::string after = route_text(client->rank(0, 0, now() + kDeadline));
  report["attempts"] = attempts;
  report["route_before"] = before;
  report["route_after"] = after;
  report["route_unchanged"] = before == after;
  report["refused"] = !any_accepted && before == after;
  return report;
}

json http_flood(const AttackOptions& o) {
  Result<HostPort> address = parse_host_port(o.bootstrap);
  if (!address.ok()) return json{{"attack", "http_flood"}, {"error", address.status().to_string()}};
  const std::string host = address->host;
  const int port = address->port;
  Mutex mu;
  std::map<std::string, uint64_t> answers;  // status -> count
  std::atomic<uint64_t> next{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> clients;
  const TimePoint t0 = now();
  for (int t = 0; t < o.threads; ++t) {
    clients.emplace_back([&] {
      httplib::Client cli(host, port);
      cli.set_connection_timeout(2);
      cli.set_read_timeout(5);
      std::map<std::string, uint64_t> mine;
      const std::string path = "/route";
      const std::string body = "{\"role\": \"Prefill\", \"engine_rank\": ";  // cut short
      const std::string type = "application/json";
      while (next.fetch_add(1) < o.count) {
        auto res = cli.Put(path, body, type);
        ++mine[res ? std::to_string(res->status) : "error: " + httplib::to_string(res.error())];
      }
      MutexLock lock(mu);
      for (const auto& [k, v] : mine) answers[k] += v;
    });
  }
  auto client = bootstrap::BootstrapClient::from_address(o.bootstrap);
  uint64_t health_ok = 0, health_failed = 0;
  int64_t health_max_ms = 0;
  std::thread prober([&] {
    while (!done.load()) {
      const TimePoint t = now();
      const bool ok = client.ok() && client->health(kHealthTimeout).ok();
      health_max_ms = std::max(health_max_ms, elapsed_ms(t));
      ++(ok ? health_ok : health_failed);
      std::this_thread::sleep_for(kHealthPeriod);
    }
  });
  for (auto& c : clients) c.join();
  const double secs = elapsed_s(t0);
  done = true;
  prober.join();
  json by_status = json::object();
  bool any_accepted = false;
  for (const auto& [k, v] : answers) {
    by_status[k] = v;
    any_accepted = any_accepted || k.rfind('2', 0) == 0;
  }
  return json{
      {"attack", "http_flood"},         {"requests", o.count},     {"seconds", secs},
      {"answers", by_status},           {"health_ok", health_ok},  {"health_failed", health_failed},
      {"health_max_ms", health_max_ms}, {"refused", !any_accepted}};
}

json signed_request(const AttackOptions& o, const std::string& method) {
  json report{{"attack", "signed_request"}, {"method", method}};
  Result<HostPort> address = parse_host_port(o.bootstrap);
  if (!address.ok() || !o.key) {
    report["error"] = address.ok() ? "a member's secret is needed" : address.status().to_string();
    return report;
  }
  std::string target = "/route", body;
  if (method == "PUT") {
    bootstrap::PrefillRegistration reg;
    reg.rank_ip = "127.0.0.1";
    reg.rank_port = o.first_port;
    reg.layout.kv_item_lens = {4096};
    reg.layout.head_dim = 64;
    reg.layout.dtype_bytes = 2;
    body = bootstrap::registration_to_json(reg);
  } else {
    target = "/route?engine_rank=-1&target_dp_group=-1";
  }
  httplib::Client cli(address->host, address->port);
  cli.set_connection_timeout(2);
  cli.set_read_timeout(5);
  // As a member's client does: sign for the server instance its /health names.
  auto health = cli.Get("/health");
  const auto server = bootstrap::parse_server_id(
      health ? health->get_header_value(bootstrap::kServerIdHeader) : "");
  if (!server) {
    report["error"] = "the server's /health names no id";
    return report;
  }
  const std::string header =
      bootstrap::sign_request(*o.key, *server, method, target, body, bootstrap::unix_now_ms());
  httplib::Headers headers{{bootstrap::kAuthHeader, header}};
  auto res = method == "PUT" ? cli.Put(target, headers, body, "application/json")
                             : cli.Get(target, headers);
  report["target"] = target;
  report["body"] = body;
  report["header"] = header;
  report["status"] = res ? res->status : 0;
  return report;
}

}  // namespace pdkv::hostile
