#include "kv/registry/etcd_gateway.h"

#include <fmt/format.h>
#include <sodium.h>

#include <charconv>

namespace pdkv::kv::etcd_gateway {

using nlohmann::json;

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
  static const httplib::Headers headers{{"Grpc-Metadata-hasleader", "true"}};
  return headers;
}

SigpipeBlockedHere::SigpipeBlockedHere() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  sigset_t pending;
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
}

SigpipeBlockedHere::~SigpipeBlockedHere() {
  if (!was_pending_) {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec zero{0, 0};
      sigtimedwait(&pipe, nullptr, &zero);  // consumes the one raised by our write
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace pdkv::kv::etcd_gateway
