// The bootstrap registration of one prefill rank (PUT /route body) and the instance
// layout a decode reads back (GET /route parallel info).
//
// parse_registration is the single, pure JSON -> struct function the server uses (and
// fuzzes: bootstrap/fuzz/). It checks every field: presence, JSON type (integers must be
// JSON integers, not floats or strings), sign, range, string and array limits, and the
// cross-field rules (dp_size divides world_size, engine_rank < world_size). Its errors are
// kInvalidArgument naming the field; `bad_field` (optional) receives that field's name.
//
// Thread safety: pure functions over value types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pdkv::bootstrap {

inline constexpr size_t kMaxBodyBytes = 64 * 1024;
inline constexpr size_t kMaxJsonDepth = 8;
inline constexpr size_t kMaxHostBytes = 255;
inline constexpr size_t kMaxListEntries = 4096;  // item / unit lengths per buffer kind
inline constexpr int64_t kMaxWorldSize = 1 << 16;
// Pipeline stages of one instance: each stage registers its ranks in a table of its own
// (its layers differ, so its layout does too), named by pp_rank.
inline constexpr int64_t kMaxPipelineStages = 64;

// Fields that must agree across all ranks of one prefill instance (the reference kept the
// last writer's, unchecked, so one misconfigured rank silently changed the layout every
// decode planned against). A decode checks its own layout against these.
struct InstanceLayout {
  int64_t world_size = 1;  // attention world size of the instance (all DP groups)
  int64_t dp_size = 1;
  bool enable_mla_l1_5_cache = false;
  std::vector<int64_t> kv_item_lens;
  std::vector<int64_t> kv_unit_lens;  // may be empty
  std::vector<int64_t> state_item_lens;
  std::vector<int64_t> state_unit_lens;
  int64_t page_size = 1;
  int64_t kv_head_num = 1;
  int64_t total_kv_head_num = 1;
  int64_t head_dim = 0;
  int64_t dtype_bytes = 0;
  std::string page_layout = "NHD";  // "NHD" or "HND"
  bool is_mla = false;
  // Draft model of speculative decoding (kv::KvArgs): 0 = none / as the target.
  int64_t target_layer_num = 0;
  int64_t draft_total_kv_head_num = 0;
  int64_t draft_head_dim = 0;
  // Pipeline stages of the instance (1 = none); every stage's ranks agree on it.
  int64_t pp_size = 1;

  int64_t tp_size_per_dp() const { return world_size / dp_size; }
  bool operator==(const InstanceLayout&) const = default;
};

struct PrefillRegistration {
  std::string role = "Prefill";
  int64_t engine_rank = 0;
  std::string rank_ip;
  int64_t rank_port = 0;  // the rank's ZeroMQ PULL port
  int64_t pp_rank = 0;    // the pipeline stage whose layers this rank holds
  InstanceLayout layout;
  bool operator==(const PrefillRegistration&) const = default;
};

Result<PrefillRegistration> parse_registration(std::string_view body,
                                               std::string* bad_field = nullptr);
std::string registration_to_json(const PrefillRegistration& reg);

// Names the first field where a and b differ, or "" if they agree.
std::string first_layout_difference(const InstanceLayout& a, const InstanceLayout& b);

// The parallel-info JSON fields of a layout (reference names: prefill_tp_size is the
// world size, as the reference's server answers) and its parser, used by the client.
std::string layout_to_json_fields(const InstanceLayout& layout);  // without braces
Result<InstanceLayout> parse_parallel_info(std::string_view body);

}  // namespace pdkv::bootstrap
