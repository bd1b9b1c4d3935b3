#include "kv/page_ownership.h"

#include <algorithm>
#include <limits>
#include <string>

namespace pdkv::kv {
namespace {

size_t owned_count(std::span<const uint8_t> mask) {
  return static_cast<size_t>(std::count_if(mask.begin(), mask.end(), [](uint8_t m) { return m; }));
}

std::string count_text(size_t got, size_t want) {
  return std::to_string(got) + " entries where " + std::to_string(want) + " are needed";
}

Status check_local_index(int64_t page, int64_t page_capacity) {
  if (page < 0 || page >= page_capacity) {
    return out_of_range("page_local_indices holds page " + std::to_string(page) +
                        ", outside this rank's KV buffers of " + std::to_string(page_capacity) +
                        " pages");
  }
  return Status();
}

}  // namespace

int64_t kv_page_capacity(const KvArgs& args) {
  int64_t pages = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < args.kv_data_lens.size() && i < args.kv_item_lens.size(); ++i) {
    if (args.kv_item_lens[i] == 0) continue;
    pages =
        std::min<int64_t>(pages, static_cast<int64_t>(args.kv_data_lens[i] / args.kv_item_lens[i]));
  }
  return pages;
}

Status check_chunk_ownership(std::span<const uint8_t> page_transfer_mask,
                             std::span<const int64_t> page_local_indices, size_t chunk_pages,
                             int64_t page_capacity) {
  if (page_transfer_mask.size() != chunk_pages) {
    return invalid_argument("page_transfer_mask must have one entry per page of the chunk: " +
                            count_text(page_transfer_mask.size(), chunk_pages));
  }
  const size_t owned = owned_count(page_transfer_mask);
  if (page_local_indices.size() != owned) {
    return invalid_argument("page_local_indices must name one local page per page the mask owns: " +
                            count_text(page_local_indices.size(), owned));
  }
  for (int64_t page : page_local_indices) {
    PDKV_RETURN_IF_ERROR(check_local_index(page, page_capacity));
  }
  return Status();
}

Result<std::vector<int64_t>> mask_ordered_local_indices(
    std::span<const uint8_t> page_transfer_mask, std::span<const int64_t> page_indices_mapping,
    std::span<const int64_t> page_local_indices, size_t request_pages, int64_t page_capacity) {
  if (page_transfer_mask.size() != request_pages) {
    return invalid_argument(
        "page_transfer_mask must have one entry per destination page (kv_indices): " +
        count_text(page_transfer_mask.size(), request_pages));
  }
  if (page_indices_mapping.size() != request_pages) {
    return invalid_argument(
        "page_indices_mapping must have one entry per destination page (kv_indices): " +
        count_text(page_indices_mapping.size(), request_pages));
  }
  const size_t owned = owned_count(page_transfer_mask);
  if (page_local_indices.size() != owned) {
    return invalid_argument("page_local_indices must name one local page per page the mask owns: " +
                            count_text(page_local_indices.size(), owned));
  }
  std::vector<int64_t> ordered;
  ordered.reserve(owned);
  // Two owned pages mapped to one local page would land on the same memory.
  std::vector<bool> used(owned, false);
  for (size_t i = 0; i < request_pages; ++i) {
    if (!page_transfer_mask[i]) continue;
    const int64_t k = page_indices_mapping[i];
    if (k < 0 || static_cast<uint64_t>(k) >= owned) {
      return out_of_range("page_indices_mapping[" + std::to_string(i) + "] = " + std::to_string(k) +
                          " is outside page_local_indices of length " + std::to_string(owned));
    }
    if (used[static_cast<size_t>(k)]) {
      return invalid_argument("page_indices_mapping maps two owned pages to local entry " +
                              std::to_string(k));
    }
    used[static_cast<size_t>(k)] = true;
    const int64_t page = page_local_indices[static_cast<size_t>(k)];
    PDKV_RETURN_IF_ERROR(check_local_index(page, page_capacity));
    ordered.push_back(page);
  }
  return ordered;
}

}  // namespace pdkv::kv
