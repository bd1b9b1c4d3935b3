// The path table: which path (path_kind.h) carries bytes to a peer, chosen from what both
// engines advertised on the path channel (path_messages.h) and what the locality proof
// (locality.h) showed. One row per path, fastest first; a row says which backend moves its
// bytes and why it cannot serve a peer (empty: it can). A new transport adds one row here
// and its backend in backend_factory.cc.
//
// The choice is made per (local source kind, peer, peer destination kind): device memory
// on either side rules out shm (process_vm_writev moves host memory only) and turns tcp
// into tcp_staged; a UCX without CUDA support on the side that holds device memory rules
// out ucx.
//
// Thread safety: pure functions over immutable inputs.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/path/locality.h"
#include "engine/path/path_kind.h"
#include "engine/path/path_messages.h"

namespace pdkv::engine {

// A backend this engine runs, as the table sees it.
struct LocalBackend {
  std::string_view name;
  BackendCapabilities caps;
};

struct PathInputs {
  LocalityVerdict locality;
  bool local_device_sources = false;      // the batches read device memory here
  bool peer_device_destinations = false;  // the peer registered device memory to write into
  std::span<const LocalBackend> local;    // the backends this engine runs
  std::span<const PathOffer> peer;        // the backends the peer offers
  // The backends this binary has but did not start, and why (ucx not built, ...).
  std::span<const std::pair<std::string_view, std::string>> unavailable;
};

struct PathRow {
  PathKind path;
  std::string_view backend;  // the backend that moves this path's bytes
  // Empty when the row can serve; otherwise why not (for the log, metric and report).
  // nullopt when the row does not apply to these memory kinds at all (tcp_staged for host
  // memory, tcp for device memory): not a faster path that was refused.
  std::optional<std::string> (*why_not)(const PathInputs& in);
};

// Fastest first. cuda_ipc has no row yet: its backend runs only when named
// (PDKV_ENGINE_BACKEND=cuda_ipc), not in the automatic choice.
std::span<const PathRow> path_table();

struct PathDecision {
  PathKind path = PathKind::kTcp;
  std::string_view backend;
  std::string why;  // "shm: different hosts; ucx: not built" (empty: the fastest applied)
};

// The fastest row that can serve; FailedPrecondition naming every reason when none can
// (the peer offers no backend this engine runs). With `floor`, a decision slower than it
// is FailedPrecondition too ("require_path").
Result<PathDecision> choose_path(const PathInputs& in, std::optional<PathKind> floor);

// The path a fixed backend (PDKV_ENGINE_BACKEND named one) takes for these memory kinds.
PathKind fixed_backend_path(std::string_view backend, bool device_memory);

}  // namespace pdkv::engine
