#include "plan/types.h"

#include <string>

namespace pdkv::plan {

std::string_view buffer_kind_name(BufferKind kind) {
  switch (kind) {
    case BufferKind::kKv: return "kv";
    case BufferKind::kTargetK: return "target_k";
    case BufferKind::kTargetV: return "target_v";
    case BufferKind::kDraftK: return "draft_k";
    case BufferKind::kDraftV: return "draft_v";
    case BufferKind::kState: return "mamba_state";
  }
  return "unknown";
}

Result<BufferKind> parse_buffer_kind(std::string_view name) {
  if (name == "kv") return BufferKind::kKv;
  if (name == "target_k") return BufferKind::kTargetK;
  if (name == "target_v") return BufferKind::kTargetV;
  if (name == "draft_k") return BufferKind::kDraftK;
  if (name == "draft_v") return BufferKind::kDraftV;
  if (name == "state" || name == "mamba_state") return BufferKind::kState;
  return invalid_argument("unknown buffer_kind '" + std::string(name) +
                          "' (expected kv, target_k, target_v, draft_k, draft_v, state)");
}

}  // namespace pdkv::plan
