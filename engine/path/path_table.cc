#include "engine/path/path_table.h"

#include <algorithm>

namespace pdkv::engine {
namespace {

const LocalBackend* local_backend(const PathInputs& in, std::string_view name) {
  for (const LocalBackend& b : in.local) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

const PathOffer* peer_offer(const PathInputs& in, std::string_view name) {
  for (const PathOffer& o : in.peer) {
    if (o.backend == name) return &o;
  }
  return nullptr;
}

// Why `name` is not usable on either side, or "" when both run it.
std::string both_run(const PathInputs& in, std::string_view name) {
  if (local_backend(in, name) == nullptr) {
    for (const auto& [missing, why] : in.unavailable) {
      if (missing == name) return why;
    }
    return "this engine does not run it";
  }
  if (peer_offer(in, name) == nullptr) return "the peer does not offer it";
  return "";
}

std::optional<std::string> shm_why_not(const PathInputs& in) {
  if (std::string why = both_run(in, "shm"); !why.empty()) return why;
  if (!in.locality.same_host || !in.locality.ptrace) return in.locality.why_not;
  if (in.local_device_sources) return "the sources are device memory (shm moves host memory only)";
  if (in.peer_device_destinations) {
    return "the peer writes into device memory (shm moves host memory only)";
  }
  return std::string();
}

std::optional<std::string> ucx_why_not(const PathInputs& in) {
  if (std::string why = both_run(in, "ucx"); !why.empty()) return why;
  const LocalBackend* mine = local_backend(in, "ucx");
  if (in.local_device_sources && mine->caps.device_source == DeviceSupport::kNone) {
    return "this side's UCX has no CUDA support and the sources are device memory";
  }
  if (in.peer_device_destinations && !peer_offer(in, "ucx")->device_destination) {
    return "the peer's UCX has no CUDA support and it writes into device memory";
  }
  return std::string();
}

std::optional<std::string> tcp_staged_why_not(const PathInputs& in) {
  if (!in.local_device_sources && !in.peer_device_destinations) return std::nullopt;
  return both_run(in, "tcp");
}

std::optional<std::string> tcp_why_not(const PathInputs& in) {
  if (in.local_device_sources || in.peer_device_destinations) return std::nullopt;
  return both_run(in, "tcp");
}

constexpr PathRow kRows[] = {
    {PathKind::kShm, "shm", shm_why_not},
    {PathKind::kUcx, "ucx", ucx_why_not},
    {PathKind::kTcpStaged, "tcp", tcp_staged_why_not},
    {PathKind::kTcp, "tcp", tcp_why_not},
};

}  // namespace

std::span<const PathRow> path_table() { return kRows; }

Result<PathDecision> choose_path(const PathInputs& in, std::optional<PathKind> floor) {
  std::string why;
  for (const PathRow& row : path_table()) {
    std::optional<std::string> refused = row.why_not(in);
    if (!refused) continue;
    if (refused->empty()) {
      if (floor && !at_least(row.path, *floor)) {
        return failed_precondition("the best path to this peer is " +
                                   std::string(path_name(row.path)) + ", below the required " +
                                   std::string(path_name(*floor)) +
                                   " (PDKV_ENGINE_REQUIRE_PATH): " + why);
      }
      return PathDecision{row.path, row.backend, why};
    }
    if (!why.empty()) why += "; ";
    why += std::string(path_name(row.path)) + ": " + *refused;
  }
  return failed_precondition("no path reaches this peer: " + why);
}

PathKind fixed_backend_path(std::string_view backend, bool device_memory) {
  if (backend == "shm") return PathKind::kShm;
  if (backend == "ucx") return PathKind::kUcx;
  if (backend == "cuda_ipc") return PathKind::kCudaIpc;
  return device_memory ? PathKind::kTcpStaged : PathKind::kTcp;
}

}  // namespace pdkv::engine
