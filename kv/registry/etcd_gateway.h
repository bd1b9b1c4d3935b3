// How pdkv speaks to etcd's v3 JSON gateway (the HTTP face of its gRPC API): keys and
// values travel as base64, int64 fields as JSON strings, answers carry a header with the
// store's revision, and every request asks for a member with a leader. Shared by the
// client's unary calls (etcd_client.cc) and its watch stream (etcd_watch_stream.cc).
#pragma once

#include <httplib.h>
#include <signal.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "kv/registry/etcd_types.h"

namespace pdkv::kv::etcd_gateway {

// gRPC codes the gateway reports in {"code": N}: a retry elsewhere may succeed.
inline constexpr int kGrpcDeadlineExceeded = 4;
inline constexpr int kGrpcNotFound = 5;
inline constexpr int kGrpcUnavailable = 14;

std::string to_base64(const std::string& bytes);
// kDataLoss for text that is not base64.
Result<std::string> from_base64(const std::string& text);
// etcd's JSON carries int64 as strings ("revision":"4"); absent = 0 (proto3 default).
Result<int64_t> int_field(const nlohmann::json& j, const char* name);
Result<EtcdKeyValue> parse_kv(const nlohmann::json& j);
// The body as a JSON object; kDataLoss otherwise.
Result<nlohmann::json> parse_answer(const std::string& body);
Result<int64_t> header_revision(const nlohmann::json& j);
// Refuse (rather than answer from a possibly stale store) on a member without a leader.
const httplib::Headers& request_headers();

// Blocks SIGPIPE in the calling thread for its lifetime, and discards one raised here
// meanwhile. OpenSSL writes to its socket without MSG_NOSIGNAL, so a TLS request to a
// member that closed the connection would otherwise kill the process (the plain-HTTP
// path and the rest of pdkv use MSG_NOSIGNAL). A write's SIGPIPE goes to the thread
// that wrote, so the rest of the process is untouched.
class SigpipeBlockedHere {
 public:
  SigpipeBlockedHere();
  ~SigpipeBlockedHere();
  SigpipeBlockedHere(const SigpipeBlockedHere&) = delete;
  SigpipeBlockedHere& operator=(const SigpipeBlockedHere&) = delete;

 private:
  sigset_t old_{};
  bool was_pending_ = false;  // raised before: left for its owner
};

}  // namespace pdkv::kv::etcd_gateway
