// What every attack of pdkv_hostile_peer (hostile_peer_main.cc) is told on its command
// line: the victims' endpoints, the shape of their KV pools (so a forged registration
// looks like a real decode's), and how hard to push.
//
// The attacker holds no cluster secret by default; `secret_file` gives it one of its own
// (a stranger with ANOTHER secret), never the victims'.
//
// Thread safety: plain value types.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/cluster_key.h"

namespace pdkv::hostile {

// One KV pool as robustness/chaos/rank.py lays it out: 2 x layers buffers ([K, V] per layer),
// each `pages` items of page_size x heads x head_dim x dtype_bytes bytes, TP 1.
struct PoolShape {
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t head_dim = 64;
  int64_t dtype_bytes = 2;
  int64_t page_size = 16;
  int64_t pages = 260;

  uint64_t item_bytes() const {
    return static_cast<uint64_t>(page_size * heads * head_dim * dtype_bytes);
  }
  uint64_t buffer_bytes() const { return item_bytes() * static_cast<uint64_t>(pages); }
  size_t buffers() const { return static_cast<size_t>(2 * layers); }
};

struct AttackOptions {
  std::string control;    // victim's ZeroMQ endpoint, "tcp://host:port"
  std::string as;         // endpoint the forged messages claim to come from ("" = own)
  std::string as_engine;  // engine endpoint its registrations name ("" = its own)
  std::string engine;     // victim's TCP engine, "host:port"
  std::string bootstrap;  // bootstrap server, "host:port"
  std::shared_ptr<const ClusterKey> key;  // null: no secret at all
  PoolShape shape;
  std::vector<uint64_t> rooms;   // rooms named by the forged messages
  uint64_t count = 1;            // messages, connections or requests
  uint64_t dst = 0;              // engine attacks: first destination address
  uint64_t length = 4096;        // engine attacks: bytes per write
  uint64_t grant = 0;            // engine attacks: write grant named (0 = none)
  uint32_t entries = 1u << 20;   // huge-header: entries a frame header declares
  std::string state = "failed";  // forged-status: "failed" or "success"
  // forged-status: checksum ranges the status names, each [range_addr, +range_length)
  // (0 = none): a status that makes a PDKV_VERIFY_CHECKSUM decode re-read that much.
  uint64_t ranges = 0;
  uint64_t range_addr = 0;
  uint64_t range_length = 0;
  int threads = 4;              // http-flood: concurrent clients
  std::string source;           // hold-slots: local address to connect from ("" = any)
  int hold_ms = 3000;           // how long to watch for the victim's reaction
  int first_port = 2;           // ping-flood: reply ports named (closed ones)
  bool honest = false;          // whole-pool: ask for the room's pages, not the pool
  bool malformed_only = false;  // route-poison: only routes the server must refuse anyway
};

}  // namespace pdkv::hostile
