#include "bench/registry/registry_bench.h"

#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "bootstrap/client.h"
#include "bootstrap/server.h"
#include "common/clock.h"
#include "kv/registry/etcd_route_directory.h"
#include "kv/registry/testing/etcd_cluster.h"
#include "kv/route/bootstrap_route_directory.h"

extern char** environ;

namespace pdkv::bench {
namespace {

using namespace std::chrono_literals;
using kv::RegistryKind;

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(now().time_since_epoch()).count();
}

kv::PrefillRankInfo bench_rank() {
  kv::PrefillRankInfo info;
  info.engine_rank = 0;
  info.control_endpoint = "tcp://127.0.0.1:1";  // nobody connects: only the route matters
  info.layout.page_size = 16;
  info.layout.kv_head_num = info.layout.total_kv_head_num = 8;
  info.layout.head_dim = 128;
  info.layout.dtype_bytes = 2;
  info.kv_item_lens = {4096};
  return info;
}

kv::RegistryOptions options_for(RegistryKind kind, const std::string& endpoints,
                                const std::string& prefix, int64_t ttl_s) {
  kv::RegistryOptions o;
  o.kind = kind;
  o.etcd_endpoints = endpoints.empty() ? "127.0.0.1:1" : endpoints;
  o.etcd_prefix = prefix;
  o.etcd_lease_ttl_s = ttl_s;
  return o;
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout
};

Result<Child> spawn_child(const RegistryBenchArgs& args, RegistryKind kind,
                          const std::string& endpoints, const std::string& addr) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return internal_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<std::string> argv_s = {
      "pdkv",           "bench",
      "registry",       "--child",
      "--child-addr",   addr,
      "--registry",     kind == RegistryKind::kEtcd ? "etcd" : "http",
      "--ttl",          std::to_string(args.ttl_s),
      "--child-prefix", args.child_prefix};
  if (!endpoints.empty()) {
    argv_s.push_back("--etcd-endpoints");
    argv_s.push_back(endpoints);
  }
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return internal_error(fmt::format("posix_spawn failed: {}", rc));
  }
  return Child{pid, pipe_fds[0]};
}

// The child's first line: the monotonic ns at which it started publishing.
Result<int64_t> read_start(int fd) {
  std::string line;
  char c;
  while (line.size() < 64 && ::read(fd, &c, 1) == 1 && c != '\n') line += c;
  try {
    return static_cast<int64_t>(std::stoll(line));
  } catch (const std::exception&) {
    return internal_error("child did not report its start: '" + line + "'");
  }
}

struct Round {
  double start_to_seen_ms = 0;
  std::optional<double> death_to_gone_ms;  // nullopt: still there after the wait
};

struct Series {
  std::string registry;
  std::vector<Round> rounds;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

Result<Round> run_round(const RegistryBenchArgs& args, RegistryKind kind,
                        const std::string& endpoints, kv::RouteDirectory& decode,
                        kv::EtcdRouteDirectory* etcd_decode, const std::string& addr,
                        const std::string& instance) {
  PDKV_ASSIGN_OR_RETURN(Child child, spawn_child(args, kind, endpoints, addr));
  Round round;
  auto seen = decode.lookup_prefill_rank(instance, 0, 0, now() + 20s);
  const int64_t seen_ns = monotonic_ns();
  Result<int64_t> start_ns = read_start(child.out);
  ::close(child.out);
  if (!seen.ok() || !start_ns.ok()) {
    ::kill(child.pid, SIGKILL);
    ::waitpid(child.pid, nullptr, 0);
    return !seen.ok() ? seen.status() : start_ns.status();
  }
  round.start_to_seen_ms = static_cast<double>(seen_ns - *start_ns) / 1e6;

  const TimePoint killed = now();
  ::kill(child.pid, SIGKILL);
  ::waitpid(child.pid, nullptr, 0);
  const TimePoint give_up =
      killed +
      (kind == RegistryKind::kEtcd
           ? std::chrono::seconds(3 * args.ttl_s + 5)
           : std::chrono::milliseconds(static_cast<int64_t>(args.http_stale_wait_s * 1000)));
  while (now() < give_up) {
    bool present = true;
    if (etcd_decode != nullptr) {
      auto snap = etcd_decode->watcher().snapshot();
      present = !snap || (*snap)[instance].count(0) > 0;
    } else {
      auto client = bootstrap::BootstrapClient::from_address(addr);
      present = client.ok() && client->rank(0, 0, now() + 50ms).ok();
    }
    if (!present) {
      round.death_to_gone_ms = elapsed_s(killed) * 1e3;
      break;
    }
    std::this_thread::sleep_for(etcd_decode ? 1ms : 20ms);
  }
  return round;
}

Result<Series> run_series(const RegistryBenchArgs& args, RegistryKind kind) {
  Series series{kind == RegistryKind::kEtcd ? "etcd" : "http", {}};
  std::unique_ptr<kv::testing::EtcdCluster> cluster;
  std::string endpoints = args.etcd_endpoints;
  if (kind == RegistryKind::kEtcd && endpoints.empty()) {
    PDKV_ASSIGN_OR_RETURN(cluster, kv::testing::EtcdCluster::start(1));
    endpoints = cluster->endpoints();
  }
  std::shared_ptr<kv::EtcdRouteDirectory> etcd_decode;
  if (kind == RegistryKind::kEtcd) {
    PDKV_ASSIGN_OR_RETURN(etcd_decode, kv::EtcdRouteDirectory::create(options_for(
                                           kind, endpoints, args.child_prefix, args.ttl_s)));
    etcd_decode->watcher();  // a decode is up before prefill ranks come and go
  }
  for (int i = 0; i < args.rounds; ++i) {
    // HTTP: a fresh server per round (the old one would still answer with the dead rank).
    std::unique_ptr<bootstrap::BootstrapServer> server;
    std::string addr = fmt::format("bench-{}:0", i);
    std::shared_ptr<kv::RouteDirectory> decode = etcd_decode;
    if (kind == RegistryKind::kHttp) {
      bootstrap::ServerOptions so;
      so.host = "127.0.0.1";
      so.port = 0;
      PDKV_ASSIGN_OR_RETURN(server, bootstrap::BootstrapServer::start(so));
      addr = fmt::format("127.0.0.1:{}", server->port());
      decode = std::make_shared<kv::BootstrapRouteDirectory>();
    }
    PDKV_ASSIGN_OR_RETURN(Round r,
                          run_round(args, kind, endpoints, *decode, etcd_decode.get(), addr, addr));
    std::printf("%s round %d: start->seen %.1f ms, death->gone %s\n", series.registry.c_str(), i,
                r.start_to_seen_ms,
                r.death_to_gone_ms ? fmt::format("{:.0f} ms", *r.death_to_gone_ms).c_str()
                                   : "never (stale route)");
    std::fflush(stdout);
    series.rounds.push_back(r);
  }
  return series;
}

nlohmann::json summary(const Series& s, const RegistryBenchArgs& args) {
  std::vector<double> seen, gone;
  size_t stale = 0;
  for (const Round& r : s.rounds) {
    seen.push_back(r.start_to_seen_ms);
    if (r.death_to_gone_ms) {
      gone.push_back(*r.death_to_gone_ms);
    } else {
      ++stale;
    }
  }
  nlohmann::json j{{"registry", s.registry},
                   {"rounds", s.rounds.size()},
                   {"start_to_seen_ms",
                    {{"median", percentile(seen, 0.5)},
                     {"p90", percentile(seen, 0.9)},
                     {"max", percentile(seen, 1.0)}}},
                   {"routes_never_gone", stale}};
  if (!gone.empty()) {
    j["death_to_gone_ms"] = {{"median", percentile(gone, 0.5)},
                             {"p90", percentile(gone, 0.9)},
                             {"max", percentile(gone, 1.0)}};
  }
  if (s.registry == "etcd") j["lease_ttl_s"] = args.ttl_s;
  if (s.registry == "http") j["stale_wait_s"] = args.http_stale_wait_s;
  return j;
}

}  // namespace

int run_registry_bench_child(const RegistryBenchArgs& args) {
  const int64_t start_ns = monotonic_ns();
  const RegistryKind kind = args.registry == "etcd" ? RegistryKind::kEtcd : RegistryKind::kHttp;
  auto directory = kv::make_route_directory(
      options_for(kind, args.etcd_endpoints, args.child_prefix, args.ttl_s));
  if (!directory.ok()) return 1;
  Status st = (*directory)->register_prefill_rank(args.child_addr, bench_rank(), now() + 20s);
  std::printf("%lld\n", static_cast<long long>(start_ns));
  std::fflush(stdout);
  if (!st.ok()) {
    std::fprintf(stderr, "child: %s\n", st.to_string().c_str());
    return 1;
  }
  // A live rank: (etcd) the publisher's thread keeps the lease; SIGKILL ends it.
  while (true) std::this_thread::sleep_for(1h);
}

Status run_registry_bench(const RegistryBenchArgs& args) {
  std::vector<RegistryKind> kinds;
  if (args.registry != "etcd") kinds.push_back(RegistryKind::kHttp);
  if (args.registry != "http") kinds.push_back(RegistryKind::kEtcd);
  if (args.registry != "http" && args.etcd_endpoints.empty() &&
      kv::testing::EtcdCluster::binary().empty())
    return failed_precondition("no etcd binary (/usr/bin/etcd) and no --etcd-endpoints");
  nlohmann::json out{{"bench", "registry"},
                     {"command", "pdkv bench registry"},
                     {"rounds", args.rounds},
                     {"series", nlohmann::json::array()}};
  for (RegistryKind kind : kinds) {
    PDKV_ASSIGN_OR_RETURN(Series s, run_series(args, kind));
    nlohmann::json j = summary(s, args);
    std::printf("%s\n", j.dump().c_str());
    out["series"].push_back(j);
  }
  if (out["series"].size() == 2) {
    const double http = out["series"][0]["start_to_seen_ms"]["median"].get<double>();
    const double etcd = out["series"][1]["start_to_seen_ms"]["median"].get<double>();
    out["etcd_over_http_start_to_seen"] = http > 0 ? etcd / http : 0.0;
  }
  if (!args.json_path.empty()) {
    std::ofstream f(args.json_path);
    f << out.dump(2) << "\n";
    if (!f) return internal_error("cannot write " + args.json_path);
  }
  return Status();
}

}  // namespace pdkv::bench
