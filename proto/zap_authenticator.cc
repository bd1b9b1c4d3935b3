#include "proto/zap_authenticator.h"

#include <sodium.h>

#include <string>
#include <string_view>
#include <vector>
#include <zmq_addon.hpp>

#include "common/logging.h"

namespace pdkv::proto {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

std::string_view view(const zmq::message_t& m) {
  return {static_cast<const char*>(m.data()), m.size()};
}

}  // namespace

Result<std::unique_ptr<ZapAuthenticator>> ZapAuthenticator::start(
    zmq::context_t& context, const PublicKey& admitted_client) {
  try {
    zmq::socket_t socket(context, zmq::socket_type::rep);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(kZapEndpoint);
    std::unique_ptr<ZapAuthenticator> zap(new ZapAuthenticator(std::move(socket), admitted_client));
    ZapAuthenticator* raw = zap.get();
    zap->thread_ = std::thread([raw] { raw->run(); });
    return zap;
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("zmq endpoint: cannot start the ZAP handler: ") + e.what());
  }
}

ZapAuthenticator::ZapAuthenticator(zmq::socket_t socket, const PublicKey& admitted_client)
    : socket_(std::move(socket)), admitted_client_(admitted_client) {}

ZapAuthenticator::~ZapAuthenticator() {
  if (thread_.joinable()) thread_.join();
}

void ZapAuthenticator::run() {
  for (;;) {
    std::vector<zmq::message_t> request;
    try {
      if (!zmq::recv_multipart(socket_, std::back_inserter(request))) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      continue;
    }
    // version, request id, domain, address, routing id, mechanism, credentials...
    // (RFC 27). Anything else is answered with a refusal when it can be.
    bool ok =
        request.size() == 7 && view(request[0]) == "1.0" && view(request[5]) == "CURVE" &&
        request[6].size() == admitted_client_.size() &&
        sodium_memcmp(request[6].data(), admitted_client_.data(), admitted_client_.size()) == 0;
    const std::string address = request.size() > 3 ? std::string(view(request[3])) : "?";
    if (ok) {
      admitted_.fetch_add(1, std::memory_order_relaxed);
    } else {
      refused_.fetch_add(1, std::memory_order_relaxed);
      PDKV_LOG_WARN_LIMITED(
          "control plane: refused a connection from {}: it did not prove the cluster secret",
          address);
    }
    std::vector<zmq::message_t> reply;
    reply.emplace_back(std::string_view("1.0"));
    if (request.size() > 1) {
      reply.emplace_back(request[1].data(), request[1].size());
    } else {
      reply.emplace_back();
    }
    reply.emplace_back(std::string_view(ok ? "200" : "400"));
    reply.emplace_back(std::string_view(ok ? "OK" : "not a cluster member"));
    reply.emplace_back(std::string_view(ok ? "pdkv-member" : ""));
    reply.emplace_back();  // metadata
    try {
      zmq::send_multipart(socket_, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
    }
  }
  socket_.close();
}

}  // namespace pdkv::proto
