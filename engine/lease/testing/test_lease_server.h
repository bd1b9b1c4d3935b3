// TestLeaseServer: a LeaseServer for the "shm" backend over one registered range,
// [kTestRegion, kTestRegion + kTestRegionBytes), with hooks that answer fixed values
// (hello extra "extra", region table epoch 7), listening on an ephemeral loopback port.
// For the lease tests that need a real server but no backend.
//
// Thread safety: construct and destroy on one thread; the server's own threads run
// in between (lease_server.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/cluster_key.h"
#include "common/status.h"
#include "engine/lease/lease_server.h"
#include "engine/memory_registry.h"

namespace pdkv::engine::lease::testing {

inline constexpr uint64_t kTestRegion = 0x10000;
inline constexpr uint64_t kTestRegionBytes = 0x10000;

class TestLeaseServer {
 public:
  // `key` null: no cluster secret. The lease length is 2000 ms.
  explicit TestLeaseServer(std::shared_ptr<const ClusterKey> key, int handshake_timeout_ms = 2000,
                           int max_connections = 512);
  TestLeaseServer(const TestLeaseServer&) = delete;
  TestLeaseServer& operator=(const TestLeaseServer&) = delete;

  // OK once listening; else why not (endpoint() is then empty).
  const Status& status() const { return status_; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  class Hooks final : public LeaseServerHooks {
   public:
    Result<std::unique_ptr<LeaseSession>> open_session() override {
      return std::unique_ptr<LeaseSession>(std::make_unique<FixedLeaseSession>("extra"));
    }
    Status regions_payload(std::vector<uint8_t>* out) override;
    uint64_t regions_epoch() override { return 7; }
  };

  MemoryRegistry registry_;
  Hooks hooks_;
  LeaseServer server_;  // last: its threads use the registry and hooks
  Status status_;
  std::string endpoint_;
};

}  // namespace pdkv::engine::lease::testing
