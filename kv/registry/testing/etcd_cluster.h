// EtcdCluster: real etcd members (/usr/bin/etcd, or PDKV_ETCD_BIN) for tests, on free
// loopback ports, with their data in a temporary directory removed at destruction. etcd's
// default heartbeat (100 ms) and election (1 s) timeouts: shorter ones made elections churn
// on a loaded 2-core machine under TSan. Not thread-safe: one test thread drives it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace pdkv::kv::testing {

class EtcdCluster {
 public:
  // The etcd binary, or "" when none is installed (tests skip, saying so).
  static std::string binary();
  // Starts `members` members and waits until the cluster answers (kUnavailable if not
  // within 20 s).
  // `extra_args` go to every member (e.g. "--auth-token=simple", TLS flags).
  static Result<std::unique_ptr<EtcdCluster>> start(int members,
                                                    std::vector<std::string> extra_args = {});
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  std::string endpoints() const;  // "127.0.0.1:p0,127.0.0.1:p1,..."
  std::string endpoint(int member) const;
  int size() const { return static_cast<int>(members_.size()); }
  void kill(int member);       // SIGKILL, waits for the process
  Status restart(int member);  // same data and ports; waits until it answers
  // SIGSTOP / SIGCONT: a member that keeps its connections open and answers nothing, as
  // one cut off by a partition looks to its clients.
  void freeze(int member);
  void thaw(int member);
  // Index of the current leader, or kUnavailable.
  Result<int> leader() const;

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
  };
  EtcdCluster() = default;
  Status launch(int member, bool initial);
  Status wait_healthy(int member) const;

  std::string dir_;
  std::string initial_cluster_;
  std::vector<std::string> extra_args_;
  std::vector<Member> members_;
};

}  // namespace pdkv::kv::testing
