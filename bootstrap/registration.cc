#include "bootstrap/registration.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/host_name.h"

namespace pdkv::bootstrap {
namespace {

using nlohmann::json;

// nlohmann's parser copes with deep nesting, but a registration is two levels deep;
// rejecting deeper input first keeps parse cost and recursion bounded whatever arrives.
bool nesting_within(std::string_view s, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

// Reads fields of one JSON object, keeping the first error and its field name.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string* bad_field) : obj_(obj), bad_field_(bad_field) {}

  int64_t integer(const char* field, int64_t min, int64_t max) {
    const json* v = find(field);
    if (!v) return 0;
    if (!v->is_number_integer()) return fail(field, "must be an integer"), 0;
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return fail(field, "is out of range"), 0;
    }
    int64_t x = v->get<int64_t>();
    if (x < 0 && min >= 0) return fail(field, fmt::format("must not be negative (got {})", x)), 0;
    if (x < min || x > max) {
      return fail(field, fmt::format("{} is outside [{}, {}]", x, min, max)), 0;
    }
    return x;
  }

  // An integer that may be absent (fields added later; older registrations lack them).
  int64_t optional_integer(const char* field, int64_t min, int64_t max, int64_t absent) {
    if (!status_.ok() || !obj_.contains(field)) return absent;
    return integer(field, min, max);
  }

  bool boolean(const char* field) {
    const json* v = find(field);
    if (!v) return false;
    if (!v->is_boolean()) return fail(field, "must be true or false"), false;
    return v->get<bool>();
  }

  std::string string(const char* field, size_t max_bytes) {
    const json* v = find(field);
    if (!v) return {};
    if (!v->is_string()) return fail(field, "must be a string"), std::string();
    const auto& s = v->get_ref<const std::string&>();
    if (s.empty()) return fail(field, "must not be empty"), std::string();
    if (s.size() > max_bytes) {
      return fail(field, fmt::format("is {} bytes, limit {}", s.size(), max_bytes)), std::string();
    }
    return s;
  }

  std::vector<int64_t> lengths(const char* field) {
    std::vector<int64_t> out;
    const json* v = find(field);
    if (!v) return out;
    if (!v->is_array()) return fail(field, "must be an array of integers"), out;
    if (v->size() > kMaxListEntries) {
      return fail(field, fmt::format("has {} entries, limit {}", v->size(), kMaxListEntries)), out;
    }
    for (const json& e : *v) {
      if (!e.is_number_integer() ||
          (e.is_number_integer() && !e.is_number_unsigned() && e.get<int64_t>() < 0)) {
        return fail(field, "entries must be non-negative integers"), std::vector<int64_t>();
      }
      if (e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return fail(field, "entry is out of range"), std::vector<int64_t>();
      }
      out.push_back(e.get<int64_t>());
    }
    return out;
  }

  void fail(const char* field, std::string why) {
    if (!status_.ok()) return;
    status_ = invalid_argument(fmt::format("field '{}': {}", field, why));
    if (bad_field_) *bad_field_ = field;
  }
  const Status& status() const { return status_; }

 private:
  const json* find(const char* field) {
    if (!status_.ok()) return nullptr;
    auto it = obj_.find(field);
    if (it == obj_.end()) return fail(field, "is missing"), nullptr;
    return &*it;
  }

  const json& obj_;
  std::string* bad_field_;
  Status status_;
};

void read_layout(FieldReader& f, InstanceLayout* l) {
  l->world_size = f.integer("world_size", 1, kMaxWorldSize);
  l->dp_size = f.integer("dp_size", 1, kMaxWorldSize);
  l->enable_mla_l1_5_cache = f.boolean("enable_mla_l1_5_cache");
  l->kv_item_lens = f.lengths("kv_item_lens");
  l->kv_unit_lens = f.lengths("kv_unit_lens");
  l->state_item_lens = f.lengths("state_item_lens");
  l->state_unit_lens = f.lengths("state_unit_lens");
  l->page_size = f.integer("page_size", 1, 1 << 20);
  l->kv_head_num = f.integer("kv_head_num", 1, 1 << 20);
  l->total_kv_head_num = f.integer("total_kv_head_num", 1, 1 << 20);
  l->head_dim = f.integer("head_dim", 1, 1 << 20);
  l->dtype_bytes = f.integer("dtype_bytes", 1, 64);
  l->page_layout = f.string("page_layout", 3);
  l->is_mla = f.boolean("is_mla");
  l->target_layer_num = f.optional_integer("target_layer_num", 0, 1 << 16, 0);
  l->draft_total_kv_head_num = f.optional_integer("draft_total_kv_head_num", 0, 1 << 20, 0);
  l->draft_head_dim = f.optional_integer("draft_head_dim", 0, 1 << 20, 0);
  l->pp_size = f.optional_integer("pp_size", 1, kMaxPipelineStages, 1);
  if (!f.status().ok()) return;
  if (l->world_size % l->dp_size != 0) {
    f.fail("dp_size", fmt::format("{} does not divide world_size {}", l->dp_size, l->world_size));
  } else if (l->page_layout != "NHD" && l->page_layout != "HND") {
    f.fail("page_layout", fmt::format("'{}' is neither NHD nor HND", l->page_layout));
  } else if (l->kv_head_num > l->total_kv_head_num) {
    f.fail("kv_head_num", "exceeds total_kv_head_num");
  }
}

Result<json> parse_object(std::string_view body, std::string* bad_field) {
  auto fail = [&](std::string why) -> Status {
    if (bad_field) *bad_field = "body";
    return invalid_argument("body: " + why);
  };
  if (body.size() > kMaxBodyBytes) {
    return fail(fmt::format("{} bytes exceeds the limit of {}", body.size(), kMaxBodyBytes));
  }
  if (!nesting_within(body, kMaxJsonDepth)) return fail("JSON nested too deeply");
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail("not valid JSON");
  if (!j.is_object()) return fail("must be a JSON object");
  return j;
}

json layout_json(const InstanceLayout& l) {
  return json{{"prefill_tp_size", l.world_size},
              {"prefill_dp_size", l.dp_size},
              {"enable_mla_l1_5_cache", l.enable_mla_l1_5_cache},
              {"kv_item_lens", l.kv_item_lens},
              {"kv_unit_lens", l.kv_unit_lens},
              {"state_item_lens", l.state_item_lens},
              {"state_unit_lens", l.state_unit_lens},
              {"page_size", l.page_size},
              {"kv_head_num", l.kv_head_num},
              {"total_kv_head_num", l.total_kv_head_num},
              {"head_dim", l.head_dim},
              {"dtype_bytes", l.dtype_bytes},
              {"page_layout", l.page_layout},
              {"is_mla", l.is_mla},
              {"target_layer_num", l.target_layer_num},
              {"draft_total_kv_head_num", l.draft_total_kv_head_num},
              {"draft_head_dim", l.draft_head_dim},
              {"pp_size", l.pp_size}};
}

}  // namespace

Result<PrefillRegistration> parse_registration(std::string_view body, std::string* bad_field) {
  PDKV_ASSIGN_OR_RETURN(json j, parse_object(body, bad_field));
  FieldReader f(j, bad_field);
  PrefillRegistration reg;
  reg.role = f.string("role", 16);
  if (f.status().ok() && reg.role != "Prefill") {
    f.fail("role", fmt::format("'{}' is not \"Prefill\" (only prefill ranks register)", reg.role));
  }
  read_layout(f, &reg.layout);
  reg.engine_rank = f.integer("engine_rank", 0, kMaxWorldSize - 1);
  reg.rank_ip = f.string("rank_ip", kMaxHostBytes);
  if (f.status().ok()) {
    // Decodes connect to it: an entry naming "*" or "host:port" is refused here, once.
    Status host = check_host_name(reg.rank_ip);
    if (!host.ok()) f.fail("rank_ip", host.message());
  }
  reg.rank_port = f.integer("rank_port", 1, 65535);
  reg.pp_rank = f.optional_integer("pp_rank", 0, kMaxPipelineStages - 1, 0);
  if (f.status().ok() && reg.engine_rank >= reg.layout.world_size) {
    f.fail("engine_rank",
           fmt::format("{} is not below world_size {}", reg.engine_rank, reg.layout.world_size));
  }
  if (f.status().ok() && reg.pp_rank >= reg.layout.pp_size) {
    f.fail("pp_rank", fmt::format("{} is not below pp_size {}", reg.pp_rank, reg.layout.pp_size));
  }
  if (!f.status().ok()) return f.status();
  return reg;
}

std::string registration_to_json(const PrefillRegistration& reg) {
  json j = layout_json(reg.layout);
  j.erase("prefill_tp_size");
  j.erase("prefill_dp_size");
  j["world_size"] = reg.layout.world_size;
  j["dp_size"] = reg.layout.dp_size;
  j["role"] = reg.role;
  j["engine_rank"] = reg.engine_rank;
  j["rank_ip"] = reg.rank_ip;
  j["rank_port"] = reg.rank_port;
  j["pp_rank"] = reg.pp_rank;
  return j.dump();
}

std::string first_layout_difference(const InstanceLayout& a, const InstanceLayout& b) {
#define PDKV_CMP(f) \
  if (a.f != b.f) return #f
  PDKV_CMP(world_size);
  PDKV_CMP(dp_size);
  PDKV_CMP(enable_mla_l1_5_cache);
  PDKV_CMP(kv_item_lens);
  PDKV_CMP(kv_unit_lens);
  PDKV_CMP(state_item_lens);
  PDKV_CMP(state_unit_lens);
  PDKV_CMP(page_size);
  PDKV_CMP(kv_head_num);
  PDKV_CMP(total_kv_head_num);
  PDKV_CMP(head_dim);
  PDKV_CMP(dtype_bytes);
  PDKV_CMP(page_layout);
  PDKV_CMP(is_mla);
  PDKV_CMP(target_layer_num);
  PDKV_CMP(draft_total_kv_head_num);
  PDKV_CMP(draft_head_dim);
  PDKV_CMP(pp_size);
#undef PDKV_CMP
  return "";
}

std::string layout_to_json_fields(const InstanceLayout& layout) {
  std::string s = layout_json(layout).dump();
  return s.substr(1, s.size() - 2);
}

Result<InstanceLayout> parse_parallel_info(std::string_view body) {
  PDKV_ASSIGN_OR_RETURN(json j, parse_object(body, nullptr));
  // Same checks as a registration, under the reference's response names.
  if (j.contains("prefill_tp_size")) j["world_size"] = j["prefill_tp_size"];
  if (j.contains("prefill_dp_size")) j["dp_size"] = j["prefill_dp_size"];
  FieldReader f(j, nullptr);
  InstanceLayout l;
  read_layout(f, &l);
  if (!f.status().ok()) return f.status().with_context("parallel info");
  return l;
}

}  // namespace pdkv::bootstrap
