#include "common/host_name.h"

#include <gtest/gtest.h>

#include <string>

namespace pdkv {
namespace {

TEST(HostNameTest, AcceptsAddressesAndHostNames) {
  for (const char* ok : {"127.0.0.1", "10.1.2.3", "::1", "fe80::1", "localhost", "node-7",
                         "prefill-0.pods.cluster.local", "prefill-0.pods.cluster.local.", "a1"}) {
    EXPECT_TRUE(check_host_name(ok).ok()) << ok << ": " << check_host_name(ok).to_string();
  }
}

TEST(HostNameTest, RefusesWhatIsNoHost) {
  for (const std::string& bad :
       {std::string(), std::string("*"), std::string("host:5000"), std::string("ipc:///tmp/x"),
        std::string("tcp://1.2.3.4"), std::string("a b"), std::string("-lead"),
        std::string("trail-"), std::string("a..b"), std::string("."), std::string("x\n"),
        std::string(64, 'a'), std::string(254, 'a'), std::string("caf\xc3\xa9"),
        std::string("a\0b", 3)}) {
    Status s = check_host_name(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "accepted: " << bad;
  }
}

// inet_pton reads a C string: a NUL ends it, so what follows was never looked at.
TEST(HostNameTest, RefusesANulAnywhereEvenAfterAValidAddress) {
  for (const std::string& bad : {std::string("127.0.0.1\0evil", 14), std::string("127.0.0.1\0", 10),
                                 std::string("::1\0:2", 6), std::string("localhost\0", 10),
                                 std::string(1, '\0') + "127.0.0.1"}) {
    Status s = check_host_name(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "accepted " << bad.size() << " bytes";
    EXPECT_NE(s.message().find("code 0"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace pdkv
