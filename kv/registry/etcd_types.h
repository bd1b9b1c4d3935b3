// What etcd answers with, as the route registry reads it: keys and values with their
// revision and lease, a range read at one revision, a watch's events. Apart from the client
// so that the gateway's decoding (etcd_gateway.h) and the client both use them without
// including each other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pdkv::kv {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdRange {
  int64_t revision = 0;  // the store's revision the range was read at
  std::vector<EtcdKeyValue> kvs;
};

struct EtcdEvent {
  bool deleted = false;  // false = put
  EtcdKeyValue kv;       // a delete carries only key and mod_revision
};

}  // namespace pdkv::kv
