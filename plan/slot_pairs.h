// Pairing of a prefill index list with a decode index list, as state slots and the
// entries of a state group are paired (docs/API.md, "State groups").
//
// The lists pair elementwise and must be of equal length, except one source entry with
// several destination entries, which is broadcast to all of them. Pairs with a negative
// entry on either side are dropped: a side marks entries it lacks or does not need
// (sliding-window pages outside the window, a decode's cached prefix).
// Pure; safe to call concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace pdkv::plan {

// Fills src_out/dst_out (cleared, reserved once) with the kept pairs; InvalidArgument
// naming both lengths when they cannot be paired.
Status pair_slots(std::span<const int64_t> src, std::span<const int64_t> dst,
                  std::vector<int64_t>& src_out, std::vector<int64_t>& dst_out);

}  // namespace pdkv::plan
