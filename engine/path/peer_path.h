// PeerPath: the path one peer's bytes take, and why no faster one was possible, as the
// engine reports it (TransferEngine::peer_paths, the KV manager's peer_paths(), the metric
// pdkv_peer_path). Thread safety: a plain value.
#pragma once

#include <string>

#include "engine/path/path_kind.h"

namespace pdkv::engine {

struct PeerPath {
  std::string peer;             // the peer engine's endpoint
  bool outgoing = true;         // this engine writes to it (false: it writes to this one)
  bool device_sources = false;  // the route for batches reading device memory
  PathKind path = PathKind::kTcp;
  std::string why;  // why each faster path was not possible ("" when none was faster)
};

}  // namespace pdkv::engine
