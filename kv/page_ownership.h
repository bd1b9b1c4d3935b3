// Checks of the MLA L1.5 page ownership an engine hands to a KVSender / KVReceiver
// (docs/API.md), made where the engine calls so that a malformed mask fails that call
// (ValueError in Python) with a message, instead of failing the room later or, worse,
// planning a transfer from pages the engine did not mean.
//
// Pure functions; safe to call concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kv/kv_args.h"

namespace pdkv::kv {

// Pages every KV buffer of the rank holds (min over buffers of data_len / item_len);
// INT64_MAX when the rank has no KV buffers.
int64_t kv_page_capacity(const KvArgs& args);

// A prefill chunk's ownership: one mask entry per chunk page (non-zero = owned) and one
// local index per owned page, each a page of this rank's buffers ([0, page_capacity)).
// InvalidArgument / OutOfRange naming the first violation.
Status check_chunk_ownership(std::span<const uint8_t> page_transfer_mask,
                             std::span<const int64_t> page_local_indices, size_t chunk_pages,
                             int64_t page_capacity);

// A decode request's ownership: one mask entry per destination page, a mapping of each
// owned page into page_local_indices (entries of unowned pages are ignored), one local
// index per owned page, each used once and inside the buffers.
//
// Returns the local indices in mask order (local[mapping[i]] for each owned i). That is
// what travels: the prefill derives the mapping as cumsum(mask) - 1 (as the reference's
// prefill does, so the wire needs no mapping), and
// this reordering makes its plan pick exactly the pages the engine's mapping names.
Result<std::vector<int64_t>> mask_ordered_local_indices(
    std::span<const uint8_t> page_transfer_mask, std::span<const int64_t> page_indices_mapping,
    std::span<const int64_t> page_local_indices, size_t request_pages, int64_t page_capacity);

}  // namespace pdkv::kv
