#include "engine/lease/testing/test_lease_server.h"

#include "engine/lease/messages.h"

namespace pdkv::engine::lease::testing {

Status TestLeaseServer::Hooks::regions_payload(std::vector<uint8_t>* out) {
  encode_regions(RegionTable{7, {{kTestRegion, kTestRegionBytes, "rk"}}}, out);
  return Status();
}

TestLeaseServer::TestLeaseServer(std::shared_ptr<const ClusterKey> key, int handshake_timeout_ms,
                                 int max_connections)
    : server_(
          LeaseServerOptions{"shm", 2000, handshake_timeout_ms, std::move(key), max_connections},
          &registry_, &hooks_) {
  status_ = registry_.add(kTestRegion, kTestRegionBytes);
  if (!status_.ok()) return;
  Result<std::string> ep = server_.listen("127.0.0.1", 0);
  if (!ep.ok()) {
    status_ = ep.status();
    return;
  }
  endpoint_ = *ep;
}

}  // namespace pdkv::engine::lease::testing
