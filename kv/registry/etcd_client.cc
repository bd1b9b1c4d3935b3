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

namespace pdkv::kv {
namespace {

using nlohmann::json;

// gRPC codes the gateway reports in {"code": N}: a retry elsewhere may succeed.
constexpr int kGrpcDeadlineExceeded = 4;
constexpr int kGrpcNotFound = 5;
constexpr int kGrpcUnavailable = 14;

std::string to_base64(const std::string& bytes) {
  const size_t max_len = sodium_base64_encoded_len(bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  std::string out(max_len, '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::char_traits<char>::length(out.c_str()));
  return out;
}

Result<std::string> from_base64(const std::string& text) {
  std::string out(text.size() / 4 * 3 + 3, '\0');
  size_t len = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(),
                        text.size(), nullptr, &len, nullptr, sodium_base64_VARIANT_ORIGINAL) != 0) {
    return data_loss("etcd answer holds malformed base64");
  }
  out.resize(len);
  return out;
}

// etcd's JSON carries int64 as strings ("revision":"4"); absent = 0 (proto3 default).
Result<int64_t> int_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return int64_t{0};
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return data_loss(fmt::format("etcd field '{}' is not an integer", name));
  const std::string& s = it->get_ref<const std::string&>();
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    return data_loss(fmt::format("etcd field '{}' is not an integer", name));
  return v;
}

Result<EtcdKeyValue> parse_kv(const json& j) {
  if (!j.is_object()) return data_loss("etcd key-value is not an object");
  EtcdKeyValue kv;
  auto key = j.find("key");
  if (key == j.end() || !key->is_string()) return data_loss("etcd key-value without key");
  PDKV_ASSIGN_OR_RETURN(kv.key, from_base64(key->get<std::string>()));
  auto value = j.find("value");
  if (value != j.end()) {
    if (!value->is_string()) return data_loss("etcd value is not a string");
    PDKV_ASSIGN_OR_RETURN(kv.value, from_base64(value->get<std::string>()));
  }
  PDKV_ASSIGN_OR_RETURN(kv.mod_revision, int_field(j, "mod_revision"));
  PDKV_ASSIGN_OR_RETURN(kv.lease, int_field(j, "lease"));
  return kv;
}

Result<json> parse_answer(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return data_loss("etcd answer is not a JSON object");
  return j;
}

Result<int64_t> header_revision(const json& j) {
  auto header = j.find("header");
  if (header == j.end() || !header->is_object()) return data_loss("etcd answer has no header");
  return int_field(*header, "revision");
}

const httplib::Headers& request_headers() {
  // Refuse (rather than answer from a possibly stale store) on a member without a leader.
  static const httplib::Headers headers{{"Grpc-Metadata-hasleader", "true"}};
  return headers;
}

}  // namespace

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
    Result<HostPort> hp = parse_host_port(item);
    if (!hp.ok()) return hp.status().with_context("etcd endpoint");
    parsed.push_back(Endpoint{std::move(hp->host), hp->port});
  }
  if (parsed.empty()) return invalid_argument("no etcd endpoint given");
  return std::shared_ptr<EtcdClient>(new EtcdClient(std::move(parsed), request_timeout));
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

EtcdClient::EtcdClient(std::vector<Endpoint> endpoints, std::chrono::milliseconds request_timeout)
    : endpoints_(std::move(endpoints)),
      request_timeout_(request_timeout),
      description_(describe(endpoints_)) {}

Result<std::string> EtcdClient::call(const std::string& path, const std::string& body,
                                     TimePoint deadline) {
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
      httplib::Client cli(ep.host, ep.port);
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
      const bool answered = cli.send(req, res, error);
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
    httplib::Client cli(ep.host, ep.port);
    cli.set_connection_timeout(timeout);
    cli.set_read_timeout(timeout);
    cli.set_write_timeout(timeout);
    httplib::Result r = cli.Post("/v3/kv/range", request_headers(), body, "application/json");
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

std::unique_ptr<EtcdClient::WatchStream> EtcdClient::watch(const std::string& prefix,
                                                           int64_t start_revision) {
  return std::unique_ptr<WatchStream>(new WatchStream(*this, prefix, start_revision));
}

EtcdClient::WatchStream::WatchStream(EtcdClient& client, std::string prefix, int64_t start_revision)
    : client_(client), prefix_(std::move(prefix)), start_revision_(start_revision) {}

void EtcdClient::WatchStream::cancel() {
  cancelled_ = true;
  drop();
}

void EtcdClient::WatchStream::drop() {
  MutexLock lock(mu_);
  if (socket_ >= 0) ::shutdown(socket_, SHUT_RDWR);
}

int EtcdClient::WatchStream::endpoint() const {
  MutexLock lock(mu_);
  return endpoint_;
}

Status EtcdClient::WatchStream::run(const std::function<void()>& on_created,
                                    const OnEvents& on_events) {
  json create{{"key", to_base64(prefix_)},
              {"range_end", to_base64(etcd_prefix_end(prefix_))},
              {"start_revision", std::to_string(start_revision_)}};
  const std::string body = json{{"create_request", create}}.dump();
  std::string last_error = "cancelled";
  const size_t n = client_.endpoints_.size();
  // One attempt per member, starting with the preferred one; the caller loops.
  for (size_t i = 0; i < n && !cancelled_; ++i) {
    const size_t index = (client_.preferred_.load() + i) % n;
    const Endpoint& ep = client_.endpoints_[index];
    httplib::Client cli(ep.host, ep.port);
    cli.set_connection_timeout(client_.request_timeout_);
    // A quiet watch sends nothing for as long as nothing changes: no read timeout beyond
    // a day; a member's death closes the connection, a lost leader ends the stream.
    cli.set_read_timeout(std::chrono::hours(24));
    // drop() shuts the socket down through a duplicate of its descriptor (ours to close,
    // so never a recycled number) rather than httplib's Client::stop(), whose locking
    // across threads the uninstrumented library hides from TSan.
    cli.set_socket_options([this](int sock) {
      MutexLock lock(mu_);
      socket_ = ::dup(sock);
      if (cancelled_ && socket_ >= 0) ::shutdown(socket_, SHUT_RDWR);
    });
    {
      MutexLock lock(mu_);
      if (cancelled_) break;
      endpoint_ = static_cast<int>(index);
    }
    std::string buffer;
    Status stream_error;
    bool created = false;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v3/watch";
    req.headers = request_headers();
    req.body = body;
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      buffer.append(data, len);
      size_t newline;
      while ((newline = buffer.find('\n')) != std::string::npos) {
        std::string line = buffer.substr(0, newline);
        buffer.erase(0, newline + 1);
        json j = json::parse(line, nullptr, false);
        auto result = j.is_object() ? j.find("result") : j.end();
        if (result == j.end() || !result->is_object()) {
          auto err = j.is_object() ? j.find("error") : j.end();
          stream_error =
              err != j.end() && err->is_object() && err->contains("message")
                  ? unavailable(fmt::format("{}:{} ended the watch: {}", ep.host, ep.port,
                                            (*err)["message"].dump()))
                  : data_loss(fmt::format("{}:{}: malformed watch message", ep.host, ep.port));
          return false;
        }
        Result<int64_t> compact = int_field(*result, "compact_revision");
        if (compact.ok() && *compact > 0) {
          stream_error = out_of_range(fmt::format("revision {} compacted", start_revision_));
          return false;
        }
        if (result->value("canceled", false)) {
          stream_error = unavailable(fmt::format("{}:{} cancelled the watch", ep.host, ep.port));
          return false;
        }
        if (!created && result->value("created", false)) {
          created = true;
          client_.preferred_.store(index);
          if (on_created) on_created();
        }
        auto events = result->find("events");
        if (events == result->end()) continue;
        Result<int64_t> revision = header_revision(*result);
        if (!events->is_array() || !revision.ok()) {
          stream_error = data_loss("etcd watch message with malformed events");
          return false;
        }
        std::vector<EtcdEvent> out;
        for (const json& e : *events) {
          if (!e.is_object() || !e.contains("kv")) {
            stream_error = data_loss("etcd watch event without kv");
            return false;
          }
          Result<EtcdKeyValue> kv = parse_kv(e["kv"]);
          if (!kv.ok()) {
            stream_error = kv.status();
            return false;
          }
          out.push_back(EtcdEvent{e.value("type", std::string()) == "DELETE", std::move(*kv)});
        }
        on_events(*revision, out);
      }
      if (buffer.size() > kMaxEtcdAnswerBytes) {
        stream_error = data_loss("etcd watch message too long");
        return false;
      }
      return !cancelled_.load();
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    try {
      cli.send(req, res, error);
    } catch (const std::exception& e) {
      stream_error = unavailable(e.what());
    }
    {
      MutexLock lock(mu_);
      if (socket_ >= 0) ::close(socket_);
      socket_ = -1;
      endpoint_ = -1;
    }
    if (!stream_error.ok()) {
      if (stream_error.code() != StatusCode::kUnavailable) return stream_error;
      last_error = stream_error.message();
    } else {
      last_error = fmt::format(
          "{}:{}: watch ended ({})", ep.host, ep.port,
          error == httplib::Error::Success ? "closed by etcd" : httplib::to_string(error));
    }
    if (created) break;  // it worked for a while: let the caller re-read before retrying
  }
  return unavailable(fmt::format("{}: {}", client_.description_, last_error));
}

}  // namespace pdkv::kv
