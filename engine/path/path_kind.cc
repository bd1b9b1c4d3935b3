#include "engine/path/path_kind.h"

namespace pdkv::engine {

std::string_view path_name(PathKind path) { return kPathNames[static_cast<uint8_t>(path)]; }

std::optional<PathKind> parse_path(std::string_view name) {
  for (PathKind p : kAllPaths) {
    if (path_name(p) == name) return p;
  }
  return std::nullopt;
}

}  // namespace pdkv::engine
