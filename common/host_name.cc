#include "common/host_name.h"

#include <arpa/inet.h>

#include <string>

namespace pdkv {
namespace {

constexpr size_t kMaxHostName = 253;
constexpr size_t kMaxLabel = 63;

// A byte that may appear in an IPv4 or IPv6 literal or a host name. Checked for every byte
// before anything reads the host as a C string: inet_pton stops at a NUL, so
// "127.0.0.1\0evil" parsed as 127.0.0.1 and was stored and served back whole.
bool is_host_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == ':';
}

bool is_ip_literal(std::string_view host) {
  const std::string copy(host);  // inet_pton needs a terminated string (no NUL inside)
  unsigned char out[16];
  return inet_pton(AF_INET, copy.c_str(), out) == 1 || inet_pton(AF_INET6, copy.c_str(), out) == 1;
}

bool is_label_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

}  // namespace

Status check_host_name(std::string_view host) {
  if (host.empty()) return invalid_argument("the host is empty");
  for (size_t i = 0; i < host.size(); ++i) {
    if (!is_host_byte(host[i])) {
      return invalid_argument("host contains a byte (code " +
                              std::to_string(static_cast<unsigned char>(host[i])) + ", at offset " +
                              std::to_string(i) + ") that is in no address or host name");
    }
  }
  if (is_ip_literal(host)) return Status();
  std::string_view name = host;
  if (name.back() == '.') name.remove_suffix(1);
  if (name.empty() || name.size() > kMaxHostName) {
    return invalid_argument("host of " + std::to_string(host.size()) +
                            " bytes is not an address or host name");
  }
  size_t label_start = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i < name.size() && name[i] != '.') {
      if (!is_label_byte(name[i])) {
        return invalid_argument("host contains a byte (code " +
                                std::to_string(static_cast<unsigned char>(name[i])) +
                                ") that is in no address or host name");
      }
      continue;
    }
    const size_t length = i - label_start;
    if (length == 0 || length > kMaxLabel) {
      return invalid_argument("host has an empty or over-long (>63 bytes) label");
    }
    if (name[label_start] == '-' || name[i - 1] == '-') {
      return invalid_argument("a label of the host starts or ends with '-'");
    }
    label_start = i + 1;
  }
  return Status();
}

}  // namespace pdkv
