#include "common/cluster_key.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace pdkv {
namespace {

std::vector<uint8_t> secret_bytes(uint8_t fill, size_t n = 32) {
  return std::vector<uint8_t>(n, fill);
}

std::string write_file(const std::string& content, mode_t mode) {
  char path[] = "/tmp/pdkv_secret_XXXXXX";
  int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  ::close(fd);
  ::chmod(path, mode);
  return path;
}

TEST(ClusterKeyTest, SameSecretSameKeysDifferentSecretDifferentKeys) {
  auto a = ClusterKey::from_secret(secret_bytes(1));
  auto b = ClusterKey::from_secret(secret_bytes(1));
  auto c = ClusterKey::from_secret(secret_bytes(2));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const std::string msg = "route put";
  auto mac_a = (*a)->mac(KeyUse::kBootstrap, {as_bytes(msg)});
  EXPECT_EQ(mac_a, (*b)->mac(KeyUse::kBootstrap, {as_bytes(msg)}));
  EXPECT_NE(mac_a, (*c)->mac(KeyUse::kBootstrap, {as_bytes(msg)}));
  EXPECT_TRUE((*b)->verify(KeyUse::kBootstrap, mac_a, {as_bytes(msg)}));
  EXPECT_FALSE((*c)->verify(KeyUse::kBootstrap, mac_a, {as_bytes(msg)}));
  EXPECT_EQ((*a)->curve_pair(KeyUse::kCurveServer).public_key,
            (*b)->curve_pair(KeyUse::kCurveServer).public_key);
  EXPECT_NE((*a)->curve_pair(KeyUse::kCurveServer).public_key,
            (*a)->curve_pair(KeyUse::kCurveClient).public_key);
}

TEST(ClusterKeyTest, KeysAreSeparatedByUseAndPartsByLength) {
  auto key = ClusterKey::from_secret(secret_bytes(7));
  ASSERT_TRUE(key.ok());
  const std::string ab = "ab", c = "c", a = "a", bc = "bc";
  EXPECT_NE((*key)->mac(KeyUse::kDataPlane, {as_bytes(ab), as_bytes(c)}),
            (*key)->mac(KeyUse::kDataPlane, {as_bytes(a), as_bytes(bc)}));
  EXPECT_NE((*key)->mac(KeyUse::kDataPlane, {as_bytes(ab)}),
            (*key)->mac(KeyUse::kBootstrap, {as_bytes(ab)}));
  EXPECT_NE((*key)->mac(KeyUse::kDataPlane, {as_bytes(ab)}),
            (*key)->mac(KeyUse::kLeaseChannel, {as_bytes(ab)}));
  auto mac = (*key)->mac(KeyUse::kDataPlane, {as_bytes(ab)});
  mac[5] ^= 1;
  EXPECT_FALSE((*key)->verify(KeyUse::kDataPlane, mac, {as_bytes(ab)}));
  EXPECT_FALSE((*key)->verify(KeyUse::kDataPlane, std::span(mac).first(31), {as_bytes(ab)}));
}

TEST(ClusterKeyTest, RejectsShortSecrets) {
  auto key = ClusterKey::from_secret(secret_bytes(1, 31));
  ASSERT_FALSE(key.ok());
  EXPECT_EQ(key.status().code(), StatusCode::kInvalidArgument);
}

TEST(ClusterKeyTest, FileWithTrailingNewlineEqualsRawBytes) {
  const std::string hex(64, 'a');
  std::string p1 = write_file(hex + "\n", 0600);
  auto from_file = ClusterKey::from_file(p1);
  ASSERT_TRUE(from_file.ok()) << from_file.status().to_string();
  auto direct = ClusterKey::from_secret(as_bytes(hex));
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ((*from_file)->mac(KeyUse::kDataPlane, {}), (*direct)->mac(KeyUse::kDataPlane, {}));
  ::unlink(p1.c_str());
}

TEST(ClusterKeyTest, RefusesFilesOthersCanReadAndMissingFiles) {
  std::string p = write_file(std::string(40, 'x'), 0644);
  auto key = ClusterKey::from_file(p);
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("chmod 600"), std::string::npos);
  ::unlink(p.c_str());
  auto missing = ClusterKey::from_file("/nonexistent/pdkv-secret");
  EXPECT_FALSE(missing.ok());
  std::string short_file = write_file("short\n", 0600);
  EXPECT_FALSE(ClusterKey::from_file(short_file).ok());
  ::unlink(short_file.c_str());
}

std::string mac_of(const ClusterKey& key) {
  const ClusterKey::Mac mac = key.mac(KeyUse::kDataPlane, {});
  return std::string(mac.begin(), mac.end());
}

// Raw bytes are the secret as they are: `head -c 32 /dev/urandom` ends in 0x0a one time in
// 256 (and in 0x0d as often); dropping it left 31 bytes, which were refused.
TEST(ClusterKeyTest, RawBytesEndingInANewlineAreTheSecretAsTheyAre) {
  std::string raw(32, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(0x80 + i);
  for (const std::string& ending : {std::string("\n"), std::string("\r"), std::string("\r\n")}) {
    const std::string secret = raw.substr(0, 32 - ending.size()) + ending;
    std::string p = write_file(secret, 0600);
    auto from_file = ClusterKey::from_file(p);
    ::unlink(p.c_str());
    ASSERT_TRUE(from_file.ok()) << from_file.status().to_string();
    auto direct = ClusterKey::from_secret(as_bytes(secret));
    ASSERT_TRUE(direct.ok());
    EXPECT_EQ(mac_of(**from_file), mac_of(**direct));
  }
  // A text secret still drops its line ending, "\r\n" included.
  const std::string hex(64, 'b');
  std::string p = write_file(hex + "\r\n", 0600);
  auto text = ClusterKey::from_file(p);
  ::unlink(p.c_str());
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(mac_of(**text), mac_of(**ClusterKey::from_secret(as_bytes(hex))));
}

TEST(ClusterKeyTest, TooLongFilesAreReportedWithTheirSize) {
  std::string p = write_file(std::string(5000, 'x'), 0600);
  auto key = ClusterKey::from_file(p);
  ::unlink(p.c_str());
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("5000 bytes"), std::string::npos) << key.status().message();
}

// Opening a FIFO for reading waits for a writer: the secret's check must refuse it first.
TEST(ClusterKeyTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  char dir[] = "/tmp/pdkv_fifo_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/secret";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::promise<Status> done;
  std::future<Status> result = done.get_future();
  std::thread reader([&] { done.set_value(ClusterKey::from_file(path).status()); });
  const bool answered = result.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!answered) {
    // Let the blocked open return, so the thread can be joined.
    int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  reader.join();
  ::unlink(path.c_str());
  ::rmdir(dir);
  ASSERT_TRUE(answered) << "from_file waited for a writer on a FIFO";
  const Status st = result.get();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("FIFO"), std::string::npos) << st.message();
}

TEST(ClusterKeyTest, RandomValuesDiffer) {
  EXPECT_NE(ClusterKey::random_nonce(), ClusterKey::random_nonce());
  EXPECT_NE(ClusterKey::random_u64(), ClusterKey::random_u64());
}

}  // namespace
}  // namespace pdkv
