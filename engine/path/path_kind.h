// PathKind: how bytes reach one peer, ranked fastest first. The ranking is fixed (the
// enum's order) and documented in docs/ARCHITECTURE.md, "Which path when":
//   cuda_ipc    device-to-device copies between GPUs of one host (a backend of its own)
//   shm         one kernel copy (process_vm_writev) between processes of one host
//   ucx         UCX puts, with the memory types its build supports
//   tcp_staged  tcp, device memory staged through pinned host slabs
//   tcp         tcp from host memory into host memory: always possible
// A path names what is used, not a backend: tcp and tcp_staged are the same backend.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pdkv::engine {

enum class PathKind : uint8_t { kCudaIpc = 0, kShm = 1, kUcx = 2, kTcpStaged = 3, kTcp = 4 };
inline constexpr std::array<PathKind, 5> kAllPaths = {
    PathKind::kCudaIpc, PathKind::kShm, PathKind::kUcx, PathKind::kTcpStaged, PathKind::kTcp};
inline constexpr std::string_view kPathNames[] = {"cuda_ipc", "shm", "ucx", "tcp_staged", "tcp"};

std::string_view path_name(PathKind path);
std::optional<PathKind> parse_path(std::string_view name);
// True when `path` is `floor` or faster (an earlier rank).
inline bool at_least(PathKind path, PathKind floor) {
  return static_cast<uint8_t>(path) <= static_cast<uint8_t>(floor);
}

}  // namespace pdkv::engine
