// etcd's own access control, against a real member with authentication enabled (etcdctl
// `user add` / `auth enable`, simple tokens that lapse after a second): pdkv
// authenticates as a user whose password it reads from a file, its ranks publish and
// its decodes find them; without the user (what pdkv did before it could authenticate)
// etcd refuses it, and a lapsed token is fetched again.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "kv/registry/etcd_access.h"
#include "kv/registry/etcd_client.h"
#include "kv/registry/testing/etcd_registry_fixture.h"

// In kv::testing, whose helpers (etcd_registry_fixture.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using namespace std::chrono_literals;

// One etcdctl command as root (once auth is on) against `cluster`; true if it exited 0.
bool etcdctl(const EtcdCluster& cluster, const std::string& command, bool as_root) {
  const std::string cmd = "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=" + cluster.endpoints() +
                          (as_root ? " --user=root:rootpw " : " ") + command + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// A file of mode `mode` holding `text`; its path.
std::string write_file(const std::string& text, mode_t mode) {
  char path[] = "/tmp/pdkv-etcd-password-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  fchmod(fd, mode);
  close(fd);
  return path;
}

class EtcdAuthTest : public EtcdRegistryTest {
 protected:
  void SetUp() override {
    EtcdRegistryTest::SetUp();
    if (IsSkipped()) return;
    if (access("/usr/bin/etcdctl", X_OK) != 0) GTEST_SKIP() << "etcdctl is not installed";
  }
  // A member with users root and pdkv (read-write on /auth only), auth enabled, simple
  // tokens lapsing after `token_ttl_s` without use.
  std::unique_ptr<EtcdCluster> start_with_auth(int token_ttl_s) {
    auto cluster = EtcdCluster::start(
        1, {"--auth-token=simple", "--auth-token-ttl=" + std::to_string(token_ttl_s)});
    EXPECT_TRUE(cluster.ok()) << cluster.status().to_string();
    if (!cluster.ok()) return nullptr;
    const EtcdCluster& c = **cluster;
    for (const char* step :
         {"user add root --new-user-password=rootpw", "user grant-role root root",
          "user add pdkv --new-user-password=pdkvpw", "role add pdkv",
          "role grant-permission pdkv --prefix=true readwrite /auth", "user grant-role pdkv pdkv",
          "auth enable"}) {
      EXPECT_TRUE(etcdctl(c, step, false)) << step;
    }
    return std::move(*cluster);
  }
};

TEST_F(EtcdAuthTest, UserWithPasswordFileRegistersAndLooksUpAndOthersAreRefused) {
  auto cluster = start_with_auth(300);
  ASSERT_NE(cluster, nullptr);
  const auto key = test_secret();
  const std::string password = write_file("pdkvpw\n", 0600);
  RegistryOptions o = etcd_options(*cluster, "/auth");
  o.etcd_user = "pdkv";
  o.etcd_password_file = password;
  auto prefill = directory(o, key);
  auto decode = directory(o, key);
  Status registered = prefill->register_prefill_rank("a:1", rank_info(0, 1, 5000), now() + 5s);
  ASSERT_TRUE(registered.ok()) << registered.to_string();
  auto found = decode->lookup_prefill_rank("a:1", 0, 0, now() + 5s);
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(found->control_endpoint, "tcp://127.0.0.1:5000");
  EXPECT_TRUE(etcdctl(*cluster, "get --prefix /auth/instances/a:1", true));

  // No user, as pdkv reached etcd before it could authenticate: refused by etcd.
  auto anonymous = directory(etcd_options(*cluster, "/auth"), key);
  Status refused = anonymous->register_prefill_rank("a:2", rank_info(0, 1, 5001), now() + 3s);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("user name is empty"), std::string::npos) << refused.message();
  // A wrong password: refused, saying so.
  const std::string wrong = write_file("nope", 0600);
  RegistryOptions w = o;
  w.etcd_password_file = wrong;
  auto impostor = directory(w, key);
  refused = impostor->register_prefill_rank("a:3", rank_info(0, 1, 5002), now() + 3s);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("authentication failed"), std::string::npos)
      << refused.message();
  unlink(password.c_str());
  unlink(wrong.c_str());
}

// Simple tokens lapse when unused: the client fetches a new one and the call succeeds.
TEST_F(EtcdAuthTest, LapsedTokenIsFetchedAgain) {
  auto cluster = start_with_auth(1);
  ASSERT_NE(cluster, nullptr);
  EtcdAccess access;
  access.user = "pdkv";
  access.password = "pdkvpw";
  auto client = EtcdClient::create(cluster->endpoints(), access);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->range_prefix("/auth/", now() + 2s).ok());
  std::this_thread::sleep_for(3s);  // the token lapses meanwhile
  auto again = (*client)->range_prefix("/auth/", now() + 2s);
  EXPECT_TRUE(again.ok()) << again.status().to_string();
  // Outside the user's permission: refused, not retried as an expired token.
  auto outside = (*client)->range_prefix("/other/", now() + 2s);
  EXPECT_EQ(outside.status().code(), StatusCode::kFailedPrecondition)
      << outside.status().to_string();
}

// The settings' rules: a password file must be private, and incomplete combinations are
// refused naming the setting.
TEST(EtcdAccessOptions, PasswordFileMustBePrivateAndCombinationsComplete) {
  RegistryOptions o;
  o.etcd_user = "pdkv";
  o.etcd_password_file = write_file("pw\n", 0644);
  auto open = etcd_access_from(o);
  EXPECT_EQ(open.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos);
  chmod(o.etcd_password_file.c_str(), 0600);
  auto ok = etcd_access_from(o);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->password, "pw");
  unlink(o.etcd_password_file.c_str());
  RegistryOptions no_password;
  no_password.etcd_user = "pdkv";
  EXPECT_FALSE(etcd_access_from(no_password).ok());
  RegistryOptions cert_without_ca;
  cert_without_ca.etcd_cert_file = "/c.pem";
  cert_without_ca.etcd_key_file = "/k.pem";
  EXPECT_NE(etcd_access_from(cert_without_ca).status().message().find("PDKV_ETCD_CA_FILE"),
            std::string::npos);
  RegistryOptions cert_without_key;
  cert_without_key.etcd_ca_file = "/ca.pem";
  cert_without_key.etcd_cert_file = "/c.pem";
  EXPECT_FALSE(etcd_access_from(cert_without_key).ok());
  EXPECT_EQ(EtcdClient::create("https://127.0.0.1:2379").status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdkv::kv::testing
