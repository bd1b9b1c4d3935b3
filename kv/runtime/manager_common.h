// Small helpers both KV managers use: a rank's incarnation and the way durations are
// written in failure reasons.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/transfer_engine.h"
#include "kv/kv_args.h"
#include "kv/metrics/transfer_metrics.h"
#include "kv/pipeline/transfer_checksum.h"
#include "proto/messages.h"

namespace pdkv::kv {

// A random id per manager start: a process restarted at the same endpoint is told apart
// from its predecessor by it (proto::RankIdentity::incarnation). Never 0.
uint64_t random_incarnation();

// "1.5 s": durations as they appear in failure reasons.
std::string format_seconds(std::chrono::milliseconds ms);

// Who this rank is on the control plane: its ranks from `args`, a fresh incarnation and
// its two endpoints (control channel, transfer engine).
proto::RankIdentity make_rank_identity(proto::Role role, const KvArgs& args,
                                       const std::string& control_endpoint,
                                       const std::string& engine_endpoint);

// One rank's metrics into `out`: its transfer metrics and the rooms it still holds, every
// sample labelled role="prefill"|"decode", rank="engine_rank".
void render_rank_metrics(PrometheusText& out, const TransferMetrics& metrics, proto::Role role,
                         int64_t engine_rank, size_t active_rooms);

// pdkv_peer_path{role, rank, path}: how many peers this rank reaches (or is written by)
// over each path, every path named (0 included) so a slow path shows as a rise.
void render_peer_paths(PrometheusText& out, proto::Role role, int64_t engine_rank,
                       const std::vector<engine::PeerPath>& paths);

// The rank that sent `message`, for the messages that name it (every one but
// TransferStatus, which the decode matches to its room's targets); nullptr otherwise.
const proto::RankIdentity* sender_of(const proto::Message& message);

// Every non-empty KV, aux and state buffer of `args`, in argument order.
std::vector<engine::Region> rank_regions(const KvArgs& args);

// Registers every non-empty KV, aux and state buffer of `args` with the engine: on a
// decode (kPeerWritable) the memory rooms grant to their prefill ranks; on a prefill
// (kLocalReadOnly) the sources of its sends, which no peer may ever write.
Status register_rank_buffers(engine::TransferEngine& engine, const KvArgs& args,
                             engine::MemoryAccess access);

}  // namespace pdkv::kv
