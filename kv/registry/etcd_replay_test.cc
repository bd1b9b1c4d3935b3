// A crashed rank's sealed entry brought back by another etcd client, against real etcd:
// the rank runs in a child process killed with SIGKILL (so its lease is not revoked), and
// an attacker process (etcdctl) keeps that lease alive and puts the old entry under it
// again. Decodes refuse the old run's entry once a newer run was seen, and drop it once
// its sealed expiry passed (etcd_route_seal.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <thread>

#include "common/mutex.h"
#include "kv/registry/etcd_client.h"
#include "kv/registry/etcd_route_keys.h"
#include "kv/registry/etcd_route_seal.h"
#include "kv/registry/testing/etcd_registry_fixture.h"

extern char** environ;

// In kv::testing, whose helpers (etcd_registry_fixture.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using namespace std::chrono_literals;

std::optional<EtcdKeyValue> read_key(const EtcdCluster& cluster, const std::string& key) {
  auto client = EtcdClient::create(cluster.endpoints());
  if (!client.ok()) return std::nullopt;
  auto range = (*client)->range_prefix(key, now() + 2s);
  if (!range.ok()) return std::nullopt;
  for (const EtcdKeyValue& kv : range->kvs) {
    if (kv.key == key) return kv;
  }
  return std::nullopt;
}

// A prefill rank in a process of its own: publishes rank 0 of `instance` at `port`, then
// waits to be killed. Returns its pid once the entry is published (-1 on failure).
pid_t start_rank_process(const RegistryOptions& options, std::shared_ptr<const ClusterKey> key,
                         const std::string& instance, int port) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    auto rank = EtcdRouteDirectory::create(options, key);
    if (!rank.ok() ||
        !(*rank)->register_prefill_rank(instance, rank_info(0, 1, port), now() + 5s).ok())
      _exit(1);
    const char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    while (true) pause();
  }
  close(ready[1]);
  char byte = 0;
  const bool published = pid > 0 && read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  if (!published && pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

void crash(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// `etcdctl lease keep-alive`: any client may renew any lease it knows the id of.
struct LeaseKeeper {
  pid_t pid = -1;
  LeaseKeeper(const EtcdCluster& cluster, int64_t lease) {
    const std::string endpoints = "--endpoints=" + cluster.endpoints();
    char id[32];
    std::snprintf(id, sizeof id, "%llx", static_cast<unsigned long long>(lease));
    std::vector<std::string> args = {"/usr/bin/etcdctl", endpoints, "lease", "keep-alive", id};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t quiet;
    posix_spawn_file_actions_init(&quiet);
    posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid, argv[0], &quiet, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&quiet);
  }
  ~LeaseKeeper() {
    if (pid > 0) crash(pid);
  }
};

// The attacker's put of `value` at `key` under `lease`, from a process of its own.
void attacker_put(const EtcdCluster& cluster, const std::string& key, int64_t lease,
                  const std::string& value) {
  char id[32];
  std::snprintf(id, sizeof id, "%llx", static_cast<unsigned long long>(lease));
  const std::string cmd = "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=" + cluster.endpoints() +
                          " put --lease=" + id + " '" + key + "' >/dev/null";
  FILE* p = popen(cmd.c_str(), "w");
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(std::fwrite(value.data(), 1, value.size(), p), value.size());
  ASSERT_EQ(pclose(p), 0) << cmd;
}

struct HeardEndpoints {
  Mutex mu;
  std::vector<std::string> endpoints PDKV_GUARDED_BY(mu);
  RouteListener listener() {
    return [this](const RouteChange& change) {
      MutexLock lock(mu);
      endpoints.push_back(change.new_endpoint);
    };
  }
  std::vector<std::string> all() {
    MutexLock lock(mu);
    return endpoints;
  }
};

class EtcdReplayTest : public EtcdRegistryTest {
 protected:
  void SetUp() override {
    EtcdRegistryTest::SetUp();
    if (access("/usr/bin/etcdctl", X_OK) != 0) GTEST_SKIP() << "etcdctl is not installed";
  }
};

// The rank restarts (a new run, a new lease); the attacker keeps the crashed run's lease
// alive and puts its old sealed entry back under it. A decode that saw the new run never
// follows the old one: its lookups and its subscribers stay on the new run's endpoint.
TEST_F(EtcdReplayTest, OldRunsEntryUnderAKeptAliveLeaseIsRefusedAfterARestart) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  const auto key = test_secret();
  const RegistryOptions options = etcd_options(*cluster, "/replay");
  auto decode = directory(options, key);
  const pid_t first_run = start_rank_process(options, key, "r:1", 5000);
  ASSERT_GT(first_run, 0);
  const std::string rank_key = etcd_rank_key("/replay", "r:1", 0);
  const std::optional<EtcdKeyValue> old = read_key(*cluster, rank_key);
  ASSERT_TRUE(old.has_value());
  ASSERT_NE(old->lease, 0);
  crash(first_run);
  LeaseKeeper keeper(*cluster, old->lease);
  ASSERT_GT(keeper.pid, 0);

  auto second_run = directory(options, key);
  ASSERT_TRUE(second_run->register_prefill_rank("r:1", rank_info(0, 1, 5001), now() + 5s).ok());
  bool moved = false;
  for (TimePoint until = now() + 5s; !moved && now() < until; std::this_thread::sleep_for(20ms)) {
    auto r = decode->lookup_prefill_rank("r:1", 0, 0, now() + 1s);
    moved = r.ok() && r->control_endpoint == "tcp://127.0.0.1:5001";
  }
  ASSERT_TRUE(moved) << "the decode never saw the restarted rank";
  HeardEndpoints heard;
  auto subscription = decode->subscribe(heard.listener());

  // The lease of the crashed run lives on (kept alive), so etcd takes the put under it.
  attacker_put(*cluster, rank_key, old->lease, old->value);
  for (TimePoint until = now() + 1500ms; now() < until; std::this_thread::sleep_for(10ms)) {
    auto r = decode->lookup_prefill_rank("r:1", 0, 0, now() + 1s);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->control_endpoint, "tcp://127.0.0.1:5001") << "followed the dead run's entry";
  }
  for (const std::string& e : heard.all()) EXPECT_NE(e, "tcp://127.0.0.1:5000");
}

// No restart: the attacker only keeps the crashed run's lease alive, so its entry stays
// in etcd. A watching decode drops the rank once the entry's sealed expiry passed, and a
// decode started afterwards never takes it.
TEST_F(EtcdReplayTest, CrashedRunsEntryUnderAKeptAliveLeaseIsDroppedAtItsSealedExpiry) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  const auto key = test_secret();
  const RegistryOptions options = etcd_options(*cluster, "/replay");
  auto decode = directory(options, key);
  const pid_t run = start_rank_process(options, key, "e:1", 5000);
  ASSERT_GT(run, 0);
  auto first = decode->lookup_prefill_rank("e:1", 0, 0, now() + 5s);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  const std::string rank_key = etcd_rank_key("/replay", "e:1", 0);
  const std::optional<EtcdKeyValue> old = read_key(*cluster, rank_key);
  ASSERT_TRUE(old.has_value());
  crash(run);
  const TimePoint crashed = now();
  LeaseKeeper keeper(*cluster, old->lease);
  ASSERT_GT(keeper.pid, 0);

  // Sealed at most kSealLifetimeTtls TTLs ahead; refused kSealClockSkew after that.
  const auto bound =
      std::chrono::seconds(kSealLifetimeTtls * options.etcd_lease_ttl_s) + kSealClockSkew + 2s;
  bool gone = false;
  while (!gone && now() - crashed < bound) {
    auto snap = decode->watcher().snapshot();
    gone = snap && (*snap)["e:1"].count(0) == 0;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(gone) << "the decode still follows the crashed rank";
  ASSERT_TRUE(read_key(*cluster, rank_key).has_value()) << "the kept-alive lease ended anyway";
  auto lookup = decode->lookup_prefill_rank("e:1", 0, 0, now() + 300ms);
  EXPECT_EQ(lookup.status().code(), StatusCode::kDeadlineExceeded);
  auto late = directory(options, key);
  auto late_lookup = late->lookup_prefill_rank("e:1", 0, 0, now() + 1s);
  EXPECT_EQ(late_lookup.status().code(), StatusCode::kDeadlineExceeded)
      << "a new decode took the expired entry";
}

}  // namespace
}  // namespace pdkv::kv::testing
