// Client TLS to a real etcd member that serves only TLS and requires client certificates
// (--client-cert-auth), with a test CA made by openssl: pdkv with the CA and its client
// certificate publishes and looks up; plain HTTP (what pdkv spoke before it had TLS
// settings), no client certificate, or another CA get nothing from it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// A CA, a server certificate for 127.0.0.1 and a client certificate signed by it, and a
// second CA that signed neither, under `dir`.
bool make_certificates(const std::string& dir) {
  const std::string script =
      "set -e; cd '" + dir +
      "'; "
      "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > "
      "ext; "
      "for ca in ca other; do openssl req -x509 -newkey rsa:2048 -nodes -keyout $ca.key "
      "-out $ca.pem -days 1 -subj /CN=pdkv-test-$ca; done; "
      "for who in server client; do openssl req -newkey rsa:2048 -nodes -keyout $who.key "
      "-out $who.csr -subj /CN=$who; openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key "
      "-CAcreateserial -out $who.pem -days 1 -extfile ext; done; chmod 600 *.key";
  return std::system(("(" + script + ") >/dev/null 2>&1").c_str()) == 0;
}

class EtcdTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdCluster::binary().empty()) GTEST_SKIP() << "etcd is not installed";
    if (std::system("command -v openssl >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "openssl is not installed";
    char tmpl[] = "/tmp/pdkv-etcd-tls-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(make_certificates(dir_));
    client_port_ = free_port();
    const int peer_port = free_port();
    const std::string client = "https://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    std::vector<std::string> args = {EtcdCluster::binary(),
                                     "--data-dir=" + dir_ + "/data",
                                     "--listen-client-urls=" + client,
                                     "--advertise-client-urls=" + client,
                                     "--listen-peer-urls=" + peer,
                                     "--initial-advertise-peer-urls=" + peer,
                                     "--initial-cluster=default=" + peer,
                                     "--cert-file=" + dir_ + "/server.pem",
                                     "--key-file=" + dir_ + "/server.key",
                                     "--trusted-ca-file=" + dir_ + "/ca.pem",
                                     "--client-cert-auth"};
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const std::string log = dir_ + "/etcd.log";
      if (freopen(log.c_str(), "w", stdout) == nullptr ||
          freopen(log.c_str(), "a", stderr) == nullptr)
        _exit(126);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  RegistryOptions options(bool ca, bool client_cert, const std::string& ca_name = "ca") const {
    RegistryOptions o;
    o.kind = RegistryKind::kEtcd;
    o.etcd_endpoints = "127.0.0.1:" + std::to_string(client_port_);
    o.etcd_prefix = "/tls";
    o.etcd_lease_ttl_s = 2;
    if (ca) o.etcd_ca_file = dir_ + "/" + ca_name + ".pem";
    if (client_cert) {
      o.etcd_cert_file = dir_ + "/client.pem";
      o.etcd_key_file = dir_ + "/client.key";
    }
    return o;
  }
  // A range read with `o`'s access, retried until etcd is up or `deadline`.
  Status reach(const RegistryOptions& o, TimePoint deadline) const {
    auto access = etcd_access_from(o);
    if (!access.ok()) return access.status();
    auto client = EtcdClient::create(o.etcd_endpoints, *access);
    if (!client.ok()) return client.status();
    return (*client)->range_prefix("/tls/", deadline).status();
  }

  std::string dir_;
  int client_port_ = 0;
  pid_t pid_ = -1;
};

TEST_F(EtcdTlsTest, ClientCertificateAndCaReachEtcdAndNothingElseDoes) {
  const Status up = reach(options(true, true), now() + 20s);
  ASSERT_TRUE(up.ok()) << up.to_string() << " (log " << dir_ << "/etcd.log)";
  const auto key = test_secret();
  auto prefill = directory(options(true, true), key);
  auto decode = directory(options(true, true), key);
  Status registered = prefill->register_prefill_rank("t:1", rank_info(0, 1, 5000), now() + 5s);
  ASSERT_TRUE(registered.ok()) << registered.to_string();
  auto found = decode->lookup_prefill_rank("t:1", 0, 0, now() + 5s);
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(found->control_endpoint, "tcp://127.0.0.1:5000");

  // Plain HTTP to the TLS port (pdkv before its TLS settings), TLS without a client
  // certificate, and TLS that trusts another CA: none gets an answer.
  EXPECT_FALSE(reach(options(false, false), now() + 1s).ok());
  EXPECT_FALSE(reach(options(true, false), now() + 1s).ok());
  const Status other_ca = reach(options(true, true, "other"), now() + 1s);
  EXPECT_NE(other_ca.message().find("SSLServerVerification"), std::string::npos)
      << other_ca.to_string();
}

}  // namespace
}  // namespace pdkv::kv::testing
