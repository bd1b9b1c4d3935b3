// Registration bodies for the bootstrap tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bootstrap/registration.h"

namespace pdkv::bootstrap::testing {

inline PrefillRegistration sample_registration(int64_t engine_rank, int64_t world = 4,
                                               int64_t dp = 2) {
  PrefillRegistration r;
  r.engine_rank = engine_rank;
  r.rank_ip = "127.0.0.1";
  r.rank_port = 30000 + engine_rank;
  r.layout.world_size = world;
  r.layout.dp_size = dp;
  r.layout.kv_item_lens = {4096, 4096};
  r.layout.kv_unit_lens = {256, 256};
  r.layout.state_item_lens = {};
  r.layout.state_unit_lens = {};
  r.layout.page_size = 16;
  r.layout.kv_head_num = 1;
  r.layout.total_kv_head_num = 2;
  r.layout.head_dim = 128;
  r.layout.dtype_bytes = 2;
  return r;
}

inline nlohmann::json sample_json(int64_t engine_rank = 0) {
  return nlohmann::json::parse(registration_to_json(sample_registration(engine_rank)));
}

}  // namespace pdkv::bootstrap::testing
