#include "kv/route/stage_address.h"

#include <algorithm>
#include <charconv>

namespace pdkv::kv {
namespace {
constexpr std::string_view kQualifier = "#pp=";
}  // namespace

std::string stage_address(const std::string& bootstrap_addr, int64_t pp_rank) {
  if (pp_rank == 0) return bootstrap_addr;
  return bootstrap_addr + std::string(kQualifier) + std::to_string(pp_rank);
}

Result<StageAddress> split_stage_address(std::string_view address) {
  const size_t at = address.find('#');
  if (at == std::string_view::npos) return StageAddress{std::string(address), 0};
  const std::string_view qualifier = address.substr(at);
  StageAddress out{std::string(address.substr(0, at)), 0};
  const std::string_view digits = qualifier.substr(std::min(kQualifier.size(), qualifier.size()));
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out.pp_rank);
  if (!qualifier.starts_with(kQualifier) || digits.empty() || ec != std::errc() ||
      end != digits.data() + digits.size() || out.pp_rank < 0 ||
      out.pp_rank >= kMaxPipelineStages) {
    return invalid_argument("bootstrap address '" + std::string(address) +
                            "': a pipeline stage is named '#pp=N' with N in [0, " +
                            std::to_string(kMaxPipelineStages) + ")");
  }
  return out;
}

}  // namespace pdkv::kv
