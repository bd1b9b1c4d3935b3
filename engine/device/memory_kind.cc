#include "engine/device/memory_kind.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace pdkv::engine {

std::optional<MemoryKind> parse_memory_kind(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "auto") return MemoryKind::kAuto;
  if (lower == "host" || lower == "cpu" || lower == "dram") return MemoryKind::kHost;
  if (lower == "cuda" || lower == "gpu" || lower == "vram") return MemoryKind::kCuda;
  return std::nullopt;
}

}  // namespace pdkv::engine
