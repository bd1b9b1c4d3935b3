#include "kv/registry/etcd_client.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/host_port.h"
#include "common/logging.h"
#include "kv/registry/etcd_gateway.h"

namespace pdkv::kv {

using nlohmann::json;
using namespace etcd_gateway;

std::string etcd_prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) != 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Result<std::shared_ptr<EtcdClient>> EtcdClient::create(const std::string& endpoints,
                                                       std::chrono::milliseconds request_timeout) {
  return create(endpoints, EtcdAccess{}, request_timeout);
}

Result<std::shared_ptr<EtcdClient>> EtcdClient::create(const std::string& endpoints,
                                                       EtcdAccess access,
                                                       std::chrono::milliseconds request_timeout) {
  if (sodium_init() < 0) return internal_error("libsodium failed to initialise");
  std::vector<Endpoint> parsed;
  size_t start = 0;
  while (start <= endpoints.size()) {
    size_t comma = endpoints.find(',', start);
    if (comma == std::string::npos) comma = endpoints.size();
    std::string_view item(endpoints.data() + start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    // Tolerate the scheme etcdctl users write.
    if (item.substr(0, 7) == "http://") item.remove_prefix(7);
    if (item.substr(0, 8) == "https://") {
      if (!access.tls())
        return invalid_argument("etcd endpoint '" + std::string(item) +
                                "': TLS needs the members' CA (PDKV_ETCD_CA_FILE)");
      item.remove_prefix(8);
    }
    Result<HostPort> hp = parse_host_port(item);
    if (!hp.ok()) return hp.status().with_context("etcd endpoint");
    parsed.push_back(Endpoint{std::move(hp->host), hp->port});
  }
  if (parsed.empty()) return invalid_argument("no etcd endpoint given");
  return std::shared_ptr<EtcdClient>(
      new EtcdClient(std::move(parsed), std::move(access), request_timeout));
}

namespace {
std::string describe(const auto& endpoints) {
  std::string out = "etcd at ";
  for (size_t i = 0; i < endpoints.size(); ++i) {
    if (i) out += ',';
    out += fmt::format("{}:{}", endpoints[i].host, endpoints[i].port);
  }
  return out;
}
}  // namespace

EtcdClient::EtcdClient(std::vector<Endpoint> endpoints, EtcdAccess access,
                       std::chrono::milliseconds request_timeout)
    : endpoints_(std::move(endpoints)),
      access_(std::move(access)),
      request_timeout_(request_timeout),
      description_(describe(endpoints_)) {}

std::unique_ptr<httplib::Client> EtcdClient::connect(const Endpoint& ep) const {
  if (!access_.tls()) return std::make_unique<httplib::Client>(ep.host, ep.port);
  const std::string host = ep.host.find(':') != std::string::npos ? "[" + ep.host + "]" : ep.host;
  auto cli = std::make_unique<httplib::Client>(fmt::format("https://{}:{}", host, ep.port),
                                               access_.cert_file, access_.key_file);
  cli->set_ca_cert_path(access_.ca_file);
  cli->enable_server_certificate_verification(true);
  return cli;
}

std::string EtcdClient::token() const {
  MutexLock lock(token_mu_);
  return token_;
}

Status EtcdClient::authenticate(TimePoint deadline) {
  const std::string request = json{{"name", access_.user}, {"password", access_.password}}.dump();
  PDKV_ASSIGN_OR_RETURN(std::string body,
                        call("/v3/auth/authenticate", request, deadline, /*with_token=*/false));
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("token") || !j["token"].is_string() ||
      j["token"].get_ref<const std::string&>().empty() ||
      j["token"].get_ref<const std::string&>().size() > 4096)
    return data_loss(description_ + ": authentication answered no token");
  MutexLock lock(token_mu_);
  token_ = j["token"].get<std::string>();
  return Status();
}

Result<std::string> EtcdClient::call(const std::string& path, const std::string& body,
                                     TimePoint deadline, bool with_token) {
  with_token = with_token && !access_.user.empty();
  if (with_token && token().empty()) PDKV_RETURN_IF_ERROR(authenticate(deadline));
  bool authenticated_again = false;
  auto backoff = std::chrono::milliseconds(20);
  std::string last_error = "no attempt before the deadline";
  size_t index = preferred_.load();
  const size_t first = index;
  for (size_t attempt = 0;; ++attempt) {
    const Endpoint& ep = endpoints_[index % endpoints_.size()];
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now());
    if (left.count() <= 0 && attempt > 0) break;
    // With other members to try, one silent member (frozen, cut off) may take at most
    // half of what is left, so the call can still fail over before its deadline.
    const auto share = endpoints_.size() > 1 ? left / 2 : left;
    const auto timeout = std::clamp(share, std::chrono::milliseconds(50), request_timeout_);
    try {
      std::unique_ptr<httplib::Client> client = connect(ep);
      httplib::Client& cli = *client;
      cli.set_connection_timeout(timeout);
      cli.set_read_timeout(timeout);
      cli.set_write_timeout(timeout);
      // The answer is read through a bounded receiver: a peer cannot make us buffer more
      // than kMaxEtcdAnswerBytes.
      std::string answer;
      bool too_long = false;
      httplib::Request req;
      req.method = "POST";
      req.path = path;
      req.headers = request_headers();
      if (with_token) req.set_header("Authorization", token());
      req.body = body;
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
        if (answer.size() + len > kMaxEtcdAnswerBytes) {
          too_long = true;
          return false;
        }
        answer.append(data, len);
        return true;
      };
      httplib::Response res;
      httplib::Error error = httplib::Error::Success;
      bool answered = false;
      {
        SigpipeBlockedHere no_sigpipe;
        answered = cli.send(req, res, error);
      }
      // etcd's gateway ends every error answer with an HTTP trailer, which this
      // cpp-httplib (0.11) cannot read past: the call then reports a read error although
      // the status and the whole JSON error body arrived. Take those as the answer.
      if (!answered && res.status >= 400 && !too_long && json::accept(answer) &&
          json::parse(answer).is_object())
        answered = true;
      if (too_long) {
        return data_loss(fmt::format("{}: answer to {} longer than {} bytes", description_, path,
                                     kMaxEtcdAnswerBytes));
      }
      if (!answered) {
        last_error = fmt::format("{}:{}: {}", ep.host, ep.port, httplib::to_string(error));
      } else if (res.status == 200) {
        preferred_.store(index % endpoints_.size());
        return answer;
      } else {
        json j = json::parse(answer, nullptr, false);
        const int code = j.is_object() && j.contains("code") && j["code"].is_number_integer()
                             ? j["code"].get<int>()
                             : 0;
        std::string message = j.is_object() && j.contains("message") && j["message"].is_string()
                                  ? j["message"].get<std::string>()
                                  : answer.substr(0, 200);
        last_error = fmt::format("{}:{}: HTTP {}: {}", ep.host, ep.port, res.status, message);
        const bool elsewhere = res.status >= 500 || code == kGrpcUnavailable ||
                               code == kGrpcDeadlineExceeded ||
                               message.find("leader") != std::string::npos;
        if (code == kGrpcNotFound) return not_found(fmt::format("{}: {}", description_, message));
        // An expired token (simple tokens lapse after a while): a new one, then this
        // request again, once per call.
        if (with_token && !authenticated_again &&
            message.find("invalid auth token") != std::string::npos) {
          authenticated_again = true;
          PDKV_LOG_INFO("{}: auth token of user {} expired; authenticating again", description_,
                        access_.user);
          PDKV_RETURN_IF_ERROR(authenticate(deadline));
          continue;
        }
        if (!elsewhere)
          return failed_precondition(fmt::format("{} refused {}: {}", description_, path, message));
      }
    } catch (const std::exception& e) {
      last_error = fmt::format("{}:{}: {}", ep.host, ep.port, e.what());
    }
    // The next call starts elsewhere too (unless another call already moved on).
    size_t failed = index % endpoints_.size();
    preferred_.compare_exchange_strong(failed, (failed + 1) % endpoints_.size());
    ++index;
    // One quick pass over every member, then back off between passes.
    if ((index - first) % endpoints_.size() == 0) {
      const auto pause = std::min<std::chrono::milliseconds>(
          backoff, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now()));
      if (pause.count() > 0) std::this_thread::sleep_for(pause);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
    if (now() >= deadline) break;
  }
  return unavailable(fmt::format("{} unreachable: {}", description_, last_error));
}

Result<int64_t> EtcdClient::grant_lease(int64_t ttl_s, TimePoint deadline) {
  PDKV_ASSIGN_OR_RETURN(std::string body,
                        call("/v3/lease/grant", json{{"TTL", ttl_s}}.dump(), deadline));
  PDKV_ASSIGN_OR_RETURN(json j, parse_answer(body));
  PDKV_ASSIGN_OR_RETURN(int64_t id, int_field(j, "ID"));
  if (id == 0) return data_loss(description_ + " granted no lease id");
  return id;
}

Result<int64_t> EtcdClient::keep_alive(int64_t lease, TimePoint deadline) {
  PDKV_ASSIGN_OR_RETURN(
      std::string body,
      call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump(), deadline));
  // The gateway streams: one {"result": ...} per request sent, here exactly one.
  const size_t newline = body.find('\n');
  PDKV_ASSIGN_OR_RETURN(json j, parse_answer(body.substr(0, newline)));
  auto result = j.find("result");
  if (result == j.end() || !result->is_object())
    return unavailable(description_ + " ended the keepalive without an answer");
  return int_field(*result, "TTL");
}

Result<int64_t> EtcdClient::lease_time_to_live(int64_t lease, TimePoint deadline) {
  PDKV_ASSIGN_OR_RETURN(
      std::string body,
      call("/v3/lease/timetolive", json{{"ID", std::to_string(lease)}}.dump(), deadline));
  PDKV_ASSIGN_OR_RETURN(json j, parse_answer(body));
  // etcd answers TTL -1 for a lease that expired or was revoked (or never existed).
  return int_field(j, "TTL");
}

Status EtcdClient::revoke_lease(int64_t lease, TimePoint deadline) {
  Result<std::string> body =
      call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump(), deadline);
  if (!body.ok() && body.status().code() == StatusCode::kNotFound) return Status();
  return body.status();
}

Status EtcdClient::delete_key(const std::string& key, TimePoint deadline) {
  return call("/v3/kv/deleterange", json{{"key", to_base64(key)}}.dump(), deadline).status();
}

Result<EtcdRange> EtcdClient::range_prefix(const std::string& prefix, TimePoint deadline) {
  json request{{"key", to_base64(prefix)}, {"range_end", to_base64(etcd_prefix_end(prefix))}};
  PDKV_ASSIGN_OR_RETURN(std::string body, call("/v3/kv/range", request.dump(), deadline));
  PDKV_ASSIGN_OR_RETURN(json j, parse_answer(body));
  EtcdRange range;
  PDKV_ASSIGN_OR_RETURN(range.revision, header_revision(j));
  auto kvs = j.find("kvs");
  if (kvs != j.end()) {
    if (!kvs->is_array()) return data_loss("etcd range answer: 'kvs' is not an array");
    range.kvs.reserve(kvs->size());
    for (const json& item : *kvs) {
      PDKV_ASSIGN_OR_RETURN(EtcdKeyValue kv, parse_kv(item));
      range.kvs.push_back(std::move(kv));
    }
  }
  return range;
}

Result<bool> EtcdClient::put_if_unchanged(const std::string& guard_prefix, int64_t revision,
                                          const std::string& key, const std::string& value,
                                          int64_t lease, TimePoint deadline) {
  // Every key of the range must satisfy the compare; an empty range does.
  json compare{{"key", to_base64(guard_prefix)},
               {"range_end", to_base64(etcd_prefix_end(guard_prefix))},
               {"target", "MOD"},
               {"result", "LESS"},
               {"mod_revision", std::to_string(revision + 1)}};
  json put{{"key", to_base64(key)}, {"value", to_base64(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  json request{{"compare", json::array({compare})},
               {"success", json::array({json{{"request_put", put}}})}};
  PDKV_ASSIGN_OR_RETURN(std::string body, call("/v3/kv/txn", request.dump(), deadline));
  PDKV_ASSIGN_OR_RETURN(json j, parse_answer(body));
  auto succeeded = j.find("succeeded");
  return succeeded != j.end() && succeeded->is_boolean() && succeeded->get<bool>();
}

Status EtcdClient::probe(size_t endpoint, std::chrono::milliseconds timeout) {
  const Endpoint& ep = endpoints_[endpoint % endpoints_.size()];
  const std::string body =
      json{{"key", to_base64("pdkv-probe")}, {"count_only", true}, {"limit", 1}}.dump();
  try {
    std::unique_ptr<httplib::Client> client = connect(ep);
    httplib::Client& cli = *client;
    cli.set_connection_timeout(timeout);
    cli.set_read_timeout(timeout);
    cli.set_write_timeout(timeout);
    httplib::Headers headers = request_headers();
    if (!access_.user.empty()) headers.emplace("Authorization", token());
    SigpipeBlockedHere no_sigpipe;
    httplib::Result r = cli.Post("/v3/kv/range", headers, body, "application/json");
    if (!r)
      return unavailable(fmt::format("{}:{}: {}", ep.host, ep.port, httplib::to_string(r.error())));
    if (r->status != 200)
      return unavailable(
          fmt::format("{}:{}: HTTP {}: {}", ep.host, ep.port, r->status, r->body.substr(0, 200)));
  } catch (const std::exception& e) {
    return unavailable(fmt::format("{}:{}: {}", ep.host, ep.port, e.what()));
  }
  return Status();
}

}  // namespace pdkv::kv
