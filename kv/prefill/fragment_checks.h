// The checks a prefill makes of a decode's fragments before planning with them, and the
// page strides it gives them (its own and the decode's registered ones).
//
// Pure; safe to call concurrently.
#pragma once

#include <span>
#include <vector>

#include "common/status.h"
#include "kv/kv_args.h"
#include "plan/types.h"
#include "proto/messages.h"

namespace pdkv::kv {

// Each fragment names a buffer the prefill has and stays inside one of its pages (source
// side) and inside one destination page of the stride the decode's planner wrote;
// InvalidArgument naming the fragment otherwise.
Status check_fragment_sources(const KvArgs& prefill, std::span<const plan::Fragment> fragments);

// Sets every fragment's strides to the real ones: the prefill's (kv_page_strides,
// state_page_strides) and the decode's registered ones, checking the destination range
// lies inside the decode's item wherever the decode's pages are strided.
Status apply_page_strides(const KvArgs& prefill, const proto::BufferRegistration& reg,
                          std::vector<plan::Fragment>& fragments);

}  // namespace pdkv::kv
