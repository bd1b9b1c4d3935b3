// EtcdClient's watch: one long-lived streaming request per attempt, read as etcd's
// gateway writes it (one JSON message per chunk), until cancelled or dropped.
#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kv/registry/etcd_client.h"
#include "kv/registry/etcd_gateway.h"

namespace pdkv::kv {

using nlohmann::json;
using namespace etcd_gateway;

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
    std::unique_ptr<httplib::Client> connection = client_.connect(ep);
    httplib::Client& cli = *connection;
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
    // The token the last call fetched: a watch follows a range read, which fetched one.
    if (!client_.access_.user.empty()) req.set_header("Authorization", client_.token());
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
      // For the stream's life (its events' callbacks included): TLS writes raise SIGPIPE.
      SigpipeBlockedHere no_sigpipe;
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
