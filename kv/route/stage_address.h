// Pipeline-stage addresses: how one prefill instance's stages are told apart.
//
// A prefill instance with pipeline parallelism has one bootstrap server, but each stage's
// ranks hold other KV layers, so each stage is an instance of its own to a decode: its own
// layout, its own ranks, rooms resolved and waited for on their own. The managers name a
// stage by a qualified address, "host:port" for stage 0 (an instance without pipeline
// parallelism, unchanged) and "host:port#pp=N" for stage N; route directories key on it
// (the etcd registry stores each stage under its own key) and the HTTP directory turns it
// back into the server's address plus `target_pp_rank` (bootstrap/server.h). Pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pdkv::kv {

// As the bootstrap server's bound (bootstrap/registration.h), which checks its own input.
inline constexpr int64_t kMaxPipelineStages = 64;

struct StageAddress {
  std::string server;   // "host:port" of the bootstrap server
  int64_t pp_rank = 0;  // the stage
};

// `bootstrap_addr` itself for stage 0, else with the stage's qualifier.
std::string stage_address(const std::string& bootstrap_addr, int64_t pp_rank);

// The server and stage of a (possibly qualified) address; kInvalidArgument for a
// qualifier that is not "#pp=N" with N in [0, 64).
Result<StageAddress> split_stage_address(std::string_view address);

}  // namespace pdkv::kv
