#include "common/host_port.h"

#include <gtest/gtest.h>

#include <string>

namespace pdkv {
namespace {

// Passes if parsing `text` fails with InvalidArgument whose message contains `words`.
::testing::AssertionResult refused(const std::string& text, const std::string& words) {
  Result<HostPort> r = parse_host_port(text);
  if (r.ok()) return ::testing::AssertionFailure() << "accepted as " << r->host << " " << r->port;
  if (r.status().code() != StatusCode::kInvalidArgument ||
      r.status().message().find(words) == std::string::npos) {
    return ::testing::AssertionFailure() << r.status().to_string() << " (wanted '" << words << "')";
  }
  return ::testing::AssertionSuccess();
}

// The message of a refusal (empty if accepted).
std::string error_of(const std::string& text) {
  Result<HostPort> r = parse_host_port(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

TEST(HostPortTest, ParsesNamesAndIpv4) {
  EXPECT_EQ(*parse_host_port("10.0.0.1:8998"), (HostPort{"10.0.0.1", 8998}));
  EXPECT_EQ(*parse_host_port("localhost:1"), (HostPort{"localhost", 1}));
  EXPECT_EQ(*parse_host_port("prefill-0.pods.cluster.local:65535"),
            (HostPort{"prefill-0.pods.cluster.local", 65535}));
  EXPECT_EQ(*parse_host_port("etcd_1:2379"), (HostPort{"etcd_1", 2379}));
  EXPECT_EQ(*parse_host_port("h:080"), (HostPort{"h", 80}));  // leading zeros are digits
}

TEST(HostPortTest, ParsesBracketedIpv6) {
  EXPECT_EQ(*parse_host_port("[::1]:80"), (HostPort{"::1", 80}));
  EXPECT_EQ(*parse_host_port("[fe80::1%eth0]:5000"), (HostPort{"fe80::1%eth0", 5000}));
  EXPECT_EQ(*parse_host_port("[::ffff:10.0.0.1]:7"), (HostPort{"::ffff:10.0.0.1", 7}));
}

// Each malformed text and the words its refusal must contain.
struct Refusal {
  const char* text;
  const char* words;
};

TEST(HostPortTest, MalformedTextIsRefusedSayingWhy) {
  const Refusal refusals[] = {
      {"nohost", "no port"},
      {"host:", "no port"},
      {"[::1]", "no port"},
      {"[::1]:", "no port"},
      {"host:0", "port 0"},
      {"host:00000", "port 0"},
      {":80", "empty host"},
      {"[]:80", "empty host"},
      {"", "empty"},
      // Unbracketed IPv6 is ambiguous: which colon starts the port?
      {"::1:80", "brackets"},
      {"fe80::1:5000", "brackets"},
      {"[::1:80", "without ']'"},
      {"[::1]80", "after ']'"},
      {"[10.0.0.1]:80", "not an IPv6"},
      {"[localhost]:80", "not an IPv6"},
      {"[::1%]:80", "zone"},
      {"[::1%a b]:80", "zone"},
      // A scheme where none belongs.
      {"tcp://h:80", "scheme"},
      {"http://h:80", "scheme"},
  };
  for (const Refusal& r : refusals) EXPECT_TRUE(refused(r.text, r.words)) << r.text;
  EXPECT_FALSE(parse_host_port("[::1]]:80").ok());
}

TEST(HostPortTest, PortOutOfRangeIsRefused) {
  for (const char* text : {"h:65536", "h:99999", "h:4294967377", "h:99999999999999999999999"}) {
    EXPECT_TRUE(refused(text, "out of range")) << text;
  }
}

TEST(HostPortTest, PortThatIsNoNumberIsRefused) {
  for (const char* text :
       {"h:abc", "h:+80", "h:-80", "h: 80", "h:80 ", "h:8o", "h:80/x", "h:0x50", "[::1]:http"}) {
    EXPECT_TRUE(refused(text, "not a decimal number")) << text;
  }
}

TEST(HostPortTest, JunkInTheHostIsRefused) {
  for (const std::string& text :
       {std::string("a b:80"), std::string(" h:80"), std::string("h\n:80"),
        std::string("user@h:80"), std::string("h/x:80"), std::string("*:80"),
        std::string("caf\xc3\xa9:80"), std::string("a\0b:80", 6), std::string("h]:80")}) {
    EXPECT_TRUE(refused(text, "byte")) << text;
  }
  EXPECT_TRUE(refused(std::string(254, 'a') + ":80", "longer than 253"));
  EXPECT_TRUE(parse_host_port(std::string(253, 'a') + ":80").ok());
}

TEST(HostPortTest, ErrorQuotesTheTextEscaped) {
  const std::string message = error_of(std::string("h\x01\x7f'x:1"));
  EXPECT_NE(message.find("'h\\x01\\x7f\\x27x:1'"), std::string::npos) << message;
  const std::string long_message = error_of(std::string(1000, 'a'));
  EXPECT_LT(long_message.size(), 200u);
  EXPECT_NE(long_message.find("..."), std::string::npos);
}

TEST(HostPortTest, TcpEndpointNeedsTheScheme) {
  EXPECT_EQ(*parse_tcp_endpoint("tcp://10.0.0.1:5000"), (HostPort{"10.0.0.1", 5000}));
  EXPECT_EQ(*parse_tcp_endpoint("tcp://[::1]:5000"), (HostPort{"::1", 5000}));
  for (const char* text : {"10.0.0.1:5000", "ipc:///tmp/x", "TCP://h:1", "tcp:/h:1", ""}) {
    Result<HostPort> r = parse_tcp_endpoint(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find("tcp://host:port"), std::string::npos) << text;
  }
  Result<HostPort> no_port = parse_tcp_endpoint("tcp://h");
  ASSERT_FALSE(no_port.ok());
  EXPECT_NE(no_port.status().message().find("'tcp://h'"), std::string::npos)
      << no_port.status().message();
  EXPECT_FALSE(parse_tcp_endpoint("tcp://h:0").ok());
  EXPECT_FALSE(parse_tcp_endpoint("tcp://*:5000").ok());
}

TEST(HostPortTest, FormatBracketsIpv6AndRoundTrips) {
  EXPECT_EQ(format_host_port("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(format_host_port("::1", 80), "[::1]:80");
  EXPECT_EQ(format_host_port("[::1]", 80), "[::1]:80");
  EXPECT_EQ(format_tcp_endpoint("::1", 5000), "tcp://[::1]:5000");
  for (const HostPort& hp :
       {HostPort{"node-1", 1}, HostPort{"fe80::1%eth0", 65535}, HostPort{"127.0.0.1", 5555}}) {
    EXPECT_EQ(*parse_host_port(format_host_port(hp.host, hp.port)), hp);
    EXPECT_EQ(*parse_tcp_endpoint(format_tcp_endpoint(hp.host, hp.port)), hp);
  }
}

}  // namespace
}  // namespace pdkv
