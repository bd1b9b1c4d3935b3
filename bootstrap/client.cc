#include "bootstrap/client.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "bootstrap/request_auth.h"
#include "common/host_name.h"
#include "common/host_port.h"

namespace pdkv::bootstrap {

using nlohmann::json;

BootstrapClient::BootstrapClient(std::string host, int port, ClientOptions options)
    : host_(std::move(host)), port_(port), options_(options) {}

Result<BootstrapClient> BootstrapClient::from_address(std::string_view address,
                                                      ClientOptions options) {
  Result<HostPort> hp = parse_host_port(address);
  if (!hp.ok()) return hp.status().with_context("bootstrap address");
  return BootstrapClient(std::move(hp->host), hp->port, options);
}

std::optional<ServerId> BootstrapClient::known_server() const {
  MutexLock lock(server_->mu);
  return server_->id;
}

void BootstrapClient::learn_server(const ServerId& id) const {
  MutexLock lock(server_->mu);
  server_->id = id;
}

BootstrapClient::Answer BootstrapClient::request(const char* method, const std::string& path,
                                                 const std::string& body,
                                                 std::chrono::milliseconds read_timeout,
                                                 const Interrupt* interrupt) const {
  Answer a;
  try {
    httplib::Client cli(host_, port_);
    // Shuts the connection down under a request blocked reading its answer.
    Interrupt::Hook stop(interrupt, [&cli] { cli.stop(); });
    if (interrupt != nullptr && interrupt->fired()) {
      a.error = "interrupted";
      return a;
    }
    cli.set_connection_timeout(options_.connect_timeout);
    cli.set_read_timeout(read_timeout);
    cli.set_write_timeout(read_timeout);
    // /health is open, and is where the id to sign for comes from.
    const bool sign = options_.cluster_key && path != "/health";
    // At most twice: a 401 naming another server id (the server restarted since the id was
    // learned) is answered by signing for the new one.
    for (int attempt = 0; attempt < 2; ++attempt) {
      httplib::Headers headers;
      std::optional<ServerId> server;
      if (sign) {
        server = known_server();
        if (!server) {
          httplib::Result h = cli.Get("/health");
          if (!h) {
            a.error = httplib::to_string(h.error());
            return a;
          }
          server = parse_server_id(h->get_header_value(kServerIdHeader));
          if (!server) {
            a.error = fmt::format(
                "its /health names no valid {} (HTTP {}; a server of another pdkv version?)",
                kServerIdHeader, h->status);
            return a;
          }
          learn_server(*server);
        }
        headers.emplace(kAuthHeader, sign_request(*options_.cluster_key, *server, method, path,
                                                  body, unix_now_ms()));
      }
      const std::string_view verb(method);
      httplib::Result r = verb == "PUT"      ? cli.Put(path, headers, body, "application/json")
                          : verb == "POST"   ? cli.Post(path, headers, body, "application/json")
                          : verb == "DELETE" ? cli.Delete(path, headers)
                                             : cli.Get(path, headers);
      if (!r) {
        a.error = httplib::to_string(r.error());
        return a;
      }
      if (r->status == 401 && server && attempt == 0) {
        const std::optional<ServerId> now_serving =
            parse_server_id(r->get_header_value(kServerIdHeader));
        if (now_serving && *now_serving != *server) {
          learn_server(*now_serving);
          continue;
        }
      }
      a.status = r->status;
      a.body = r->body;
      return a;
    }
  } catch (const std::exception& e) {
    a.error = e.what();
  }
  return a;
}

namespace {
std::string server_message(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) {
    return j["error"].get<std::string>();
  }
  return body.substr(0, 200);
}
}  // namespace

Result<std::string> BootstrapClient::call(const char* method, const std::string& path,
                                          const std::string& body, bool retry_not_found,
                                          TimePoint deadline, const Interrupt* interrupt) const {
  auto backoff = std::chrono::milliseconds(50);
  std::string last;
  for (int attempt = 1;; ++attempt) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now());
    auto timeout = std::clamp(left, std::chrono::milliseconds(1), options_.read_timeout);
    Answer a = request(method, path, body, timeout, interrupt);
    std::string where = fmt::format("bootstrap {}:{} {} {}", host_, port_, method, path);
    if (interrupt != nullptr && interrupt->fired()) {
      return aborted(fmt::format("{}: interrupted (shutting down)", where));
    }
    if (a.status == 200) return a.body;
    if (a.status == 400) {
      return invalid_argument(fmt::format("{}: {}", where, server_message(a.body)));
    }
    if (a.status == 401) {
      return unauthenticated(
          fmt::format("{}: {} (do this process and the server share the cluster secret?)", where,
                      server_message(a.body)));
    }
    if (a.status == 409) {
      return failed_precondition(fmt::format("{}: {}", where, server_message(a.body)));
    }
    if (a.status == 404 && !retry_not_found) {
      return not_found(fmt::format("{}: {}", where, server_message(a.body)));
    }
    last = a.status == 0 ? fmt::format("no answer ({})", a.error)
                         : fmt::format("HTTP {}: {}", a.status, server_message(a.body));
    if (a.status != 0 && a.status != 404 && a.status < 500) {
      return internal_error(fmt::format("{}: unexpected {}", where, last));
    }
    const TimePoint t = now();
    if (t >= deadline) {
      return deadline_exceeded(
          fmt::format("{}: gave up after {} attempt(s); last: {}", where, attempt, last));
    }
    // The last wait is cut to the deadline and followed by one more attempt, so the
    // caller's timeout is honoured to the end instead of giving up up to a backoff early
    // (found by the chaos suite: a 2 s bootstrap timeout fired at 1.55 s).
    const std::chrono::nanoseconds pause =
        std::min<std::chrono::nanoseconds>(backoff, deadline - t);
    if (interrupt != nullptr ? interrupt->sleep_for(pause)
                             : (std::this_thread::sleep_for(pause), false)) {
      return aborted(fmt::format("{}: interrupted (shutting down)", where));
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

Status BootstrapClient::register_rank(const PrefillRegistration& reg, TimePoint deadline) const {
  auto r = call("PUT", "/route", registration_to_json(reg), false, deadline);
  return r.ok() ? Status() : r.status();
}

std::string BootstrapClient::stage_query() const {
  return options_.pp_rank == 0 ? std::string()
                               : fmt::format("&target_pp_rank={}", options_.pp_rank);
}

Result<InstanceLayout> BootstrapClient::parallel_info(TimePoint deadline,
                                                      const Interrupt* interrupt) const {
  PDKV_ASSIGN_OR_RETURN(std::string body,
                        call("GET", "/route?engine_rank=-1&target_dp_group=-1" + stage_query(), "",
                             true, deadline, interrupt));
  auto l = parse_parallel_info(body);
  if (!l.ok()) return data_loss(l.status().message());
  return l;
}

namespace {
Result<RankEndpoint> endpoint_from(const json& j, int64_t tp_rank) {
  if (!j.is_object() || !j.contains("rank_ip") || !j["rank_ip"].is_string() ||
      !j.contains("rank_port") || !j["rank_port"].is_number_integer()) {
    return data_loss("bootstrap: malformed rank entry " + j.dump().substr(0, 200));
  }
  RankEndpoint e;
  e.tp_rank = j.contains("tp_rank") && j["tp_rank"].is_number_integer()
                  ? j["tp_rank"].get<int64_t>()
                  : tp_rank;
  e.engine_rank = j.contains("engine_rank") && j["engine_rank"].is_number_integer()
                      ? j["engine_rank"].get<int64_t>()
                      : -1;
  e.rank_ip = j["rank_ip"].get<std::string>();
  if (Status host = check_host_name(e.rank_ip); !host.ok()) {
    return data_loss("bootstrap: rank entry with a bad rank_ip: " + host.message());
  }
  e.rank_port = j["rank_port"].get<int64_t>();
  return e;
}
}  // namespace

Result<RankEndpoint> BootstrapClient::rank(int64_t dp_group, int64_t tp_rank, TimePoint deadline,
                                           const Interrupt* interrupt) const {
  PDKV_ASSIGN_OR_RETURN(
      std::string body,
      call("GET",
           fmt::format("/route?engine_rank={}&target_dp_group={}", tp_rank, dp_group) +
               stage_query(),
           "", true, deadline, interrupt));
  return endpoint_from(json::parse(body, nullptr, false), tp_rank);
}

Result<std::vector<RankEndpoint>> BootstrapClient::group(int64_t dp_group,
                                                         TimePoint deadline) const {
  PDKV_ASSIGN_OR_RETURN(
      std::string body,
      call("GET", fmt::format("/route?engine_rank=-1&target_dp_group={}", dp_group) + stage_query(),
           "", true, deadline));
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("ranks") || !j["ranks"].is_array()) {
    return data_loss("bootstrap: malformed group answer " + body.substr(0, 200));
  }
  std::vector<RankEndpoint> out;
  for (const json& e : j["ranks"]) {
    PDKV_ASSIGN_OR_RETURN(RankEndpoint ep, endpoint_from(e, static_cast<int64_t>(out.size())));
    out.push_back(std::move(ep));
  }
  return out;
}

Status BootstrapClient::deregister(int64_t dp_group, int64_t tp_rank) const {
  auto r = call(
      "DELETE",
      fmt::format("/route?engine_rank={}&target_dp_group={}", tp_rank, dp_group) + stage_query(),
      "", false, now() + options_.read_timeout);
  return r.ok() ? Status() : r.status();
}

Status BootstrapClient::register_room_dp_rank(uint64_t room, int64_t dp_group,
                                              TimePoint deadline) const {
  const std::string body = json{{"bootstrap_room", room}, {"dp_rank", dp_group}}.dump();
  auto r = call("POST", "/register_dp_rank", body, false, deadline);
  return r.ok() ? Status() : r.status();
}

Status BootstrapClient::health(std::chrono::milliseconds timeout) const {
  Answer a = request("GET", "/health", "", timeout);
  if (a.status == 200) return Status();
  return unavailable(fmt::format(
      "bootstrap {}:{} /health: {}", host_, port_,
      a.status == 0 ? "no answer (" + a.error + ")" : "HTTP " + std::to_string(a.status)));
}

}  // namespace pdkv::bootstrap
