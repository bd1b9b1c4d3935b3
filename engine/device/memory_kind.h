// MemoryKind: what a registered region is made of, and so how its bytes may be touched.
//
// Host memory is read and written by the CPU (sockets, memcpy, process_vm_writev). CUDA
// device memory never is: its bytes move only through the device driver's copies
// (device_driver.h), staged through pinned host memory where a backend has no native path.
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pdkv::engine {

enum class MemoryKind : uint8_t {
  kAuto,  // a registration request only: ask the device driver what the pointer is
  kHost,
  kCuda,
};

constexpr std::string_view to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kAuto: return "auto";
    case MemoryKind::kHost: return "host";
    case MemoryKind::kCuda: return "cuda";
  }
  return "?";
}

// "auto" / "host" / "cpu" / "cuda" / "gpu" / "vram" / "dram" (sglang's and NIXL's labels).
std::optional<MemoryKind> parse_memory_kind(std::string_view text);

// What a backend does with device memory on one side of a transfer.
enum class DeviceSupport : uint8_t {
  kNone,    // refuses device regions
  kStaged,  // moves them through pinned host slabs with the driver's copies
  kNative,  // hands them to the transport as they are (UCX with CUDA support)
};

constexpr std::string_view to_string(DeviceSupport support) {
  switch (support) {
    case DeviceSupport::kNone: return "none";
    case DeviceSupport::kStaged: return "staged";
    case DeviceSupport::kNative: return "native";
  }
  return "?";
}

}  // namespace pdkv::engine
