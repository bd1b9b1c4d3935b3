#include "common/host_port.h"

#include <arpa/inet.h>

#include <cstdio>

namespace pdkv {
namespace {

constexpr size_t kMaxHostBytes = 253;   // a DNS name's limit; any IP literal is shorter
constexpr size_t kMaxQuotedBytes = 96;  // of the text repeated in an error message
constexpr std::string_view kTcpScheme = "tcp://";

// The text as an error message shows it: quoted, non-printable bytes escaped (the text
// may come from a peer or a config file), long text cut.
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < kMaxQuotedBytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (text.size() > kMaxQuotedBytes) out += "...";
  return out + "'";
}

Status bad(std::string_view text, std::string_view why) {
  return invalid_argument("address " + quoted(text) + ": " + std::string(why));
}

bool is_name_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

// "[addr]" or "[addr%zone]" -> addr checked by inet_pton; the zone is a name.
Status check_v6(std::string_view text, std::string_view inside) {
  std::string_view addr = inside;
  if (size_t pct = inside.find('%'); pct != std::string_view::npos) {
    addr = inside.substr(0, pct);
    std::string_view zone = inside.substr(pct + 1);
    if (zone.empty()) return bad(text, "empty IPv6 zone after '%'");
    for (char c : zone) {
      if (!is_name_byte(c)) return bad(text, "the IPv6 zone holds a byte no interface name has");
    }
  }
  if (addr.empty()) return bad(text, "empty host in '[]'");
  unsigned char out[16];
  const std::string copy(addr);  // inet_pton needs a terminated string
  if (inet_pton(AF_INET6, copy.c_str(), out) != 1) {
    return bad(text, "the bracketed host is not an IPv6 address");
  }
  return Status();
}

Status check_name(std::string_view text, std::string_view host) {
  if (host.empty()) return bad(text, "empty host");
  if (host.size() > kMaxHostBytes) {
    return bad(text, "host longer than " + std::to_string(kMaxHostBytes) + " bytes");
  }
  if (host.find("://") != std::string_view::npos) {
    return bad(text, "a scheme where host:port was expected");
  }
  if (host.find(':') != std::string_view::npos) {
    return bad(text, "an IPv6 address must be in brackets ([addr]:port)");
  }
  for (char c : host) {
    if (!is_name_byte(c)) {
      return bad(text, "the host holds a byte (code " +
                           std::to_string(static_cast<unsigned char>(c)) +
                           ") that is in no host name or address");
    }
  }
  return Status();
}

Result<uint16_t> parse_port(std::string_view text, std::string_view digits) {
  if (digits.empty()) return bad(text, "no port after ':'");
  uint32_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return bad(text, "the port is not a decimal number");
    value = value * 10 + static_cast<uint32_t>(c - '0');
    if (value > 65535) return bad(text, "the port is out of range (1-65535)");
  }
  if (value == 0) return bad(text, "port 0 (1-65535; 0 names no peer)");
  return static_cast<uint16_t>(value);
}

// `whole` is what the caller passed (quoted in errors); `text` its host:port part.
Result<HostPort> parse(std::string_view whole, std::string_view text) {
  if (text.empty()) return bad(whole, "empty (expected host:port)");
  HostPort out;
  std::string_view port_text;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad(whole, "'[' without ']'");
    const std::string_view inside = text.substr(1, close - 1);
    PDKV_RETURN_IF_ERROR(check_v6(whole, inside));
    const std::string_view rest = text.substr(close + 1);
    if (rest.empty()) return bad(whole, "no port (expected [addr]:port)");
    if (rest.front() != ':') return bad(whole, "expected ':' after ']'");
    out.host = std::string(inside);
    port_text = rest.substr(1);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad(whole, "no port (expected host:port)");
    const std::string_view host = text.substr(0, colon);
    PDKV_RETURN_IF_ERROR(check_name(whole, host));
    out.host = std::string(host);
    port_text = text.substr(colon + 1);
  }
  PDKV_ASSIGN_OR_RETURN(out.port, parse_port(whole, port_text));
  return out;
}

}  // namespace

Result<HostPort> parse_host_port(std::string_view text) { return parse(text, text); }

Result<HostPort> parse_tcp_endpoint(std::string_view text) {
  if (text.substr(0, kTcpScheme.size()) != kTcpScheme) {
    return invalid_argument("endpoint " + quoted(text) + " is not tcp://host:port");
  }
  return parse(text, text.substr(kTcpScheme.size()));
}

std::string format_host_port(std::string_view host, uint16_t port) {
  const bool bracket = host.find(':') != std::string_view::npos && host.front() != '[';
  std::string out;
  if (bracket) out += '[';
  out += host;
  if (bracket) out += ']';
  return out + ":" + std::to_string(port);
}

std::string format_tcp_endpoint(std::string_view host, uint16_t port) {
  return std::string(kTcpScheme) + format_host_port(host, port);
}

}  // namespace pdkv
