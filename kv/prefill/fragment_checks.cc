#include "kv/prefill/fragment_checks.h"

#include <string>

namespace pdkv::kv {

// A fragment copies bytes_per_page bytes at src_byte_offset of each source page: it must
// stay inside the page, with the prefill's own page stride. Without this a decode could
// name src_page_stride 0 and bytes_per_page = the whole pool and be pushed every other
// request's KV (a theft a hostile decode showed); with it, a room's fragments read only
// the room's own pages.
Status check_fragment_sources(const KvArgs& prefill, std::span<const plan::Fragment> fragments) {
  for (size_t i = 0; i < fragments.size(); ++i) {
    const plan::Fragment& f = fragments[i];
    const bool state = plan::is_state_kind(f.kind);
    const std::vector<uint64_t>& items = state ? prefill.state_item_lens : prefill.kv_item_lens;
    if (f.buffer_index < 0 || static_cast<size_t>(f.buffer_index) >= items.size()) {
      return invalid_argument("fragment " + std::to_string(i) + " names " +
                              (state ? "state" : "KV") + " buffer " +
                              std::to_string(f.buffer_index) + ", which the prefill does not have");
    }
    const uint64_t item = items[static_cast<size_t>(f.buffer_index)];
    const auto b = static_cast<size_t>(f.buffer_index);
    const uint64_t stride = state ? prefill.state_page_stride(b) : prefill.kv_page_stride(b);
    const bool inside = f.bytes_per_page > 0 &&
                        (f.src_page_stride_bytes == item || f.src_page_stride_bytes == stride) &&
                        f.src_byte_offset <= item && f.bytes_per_page <= item - f.src_byte_offset &&
                        f.dst_byte_offset <= f.dst_page_stride_bytes &&
                        f.bytes_per_page <= f.dst_page_stride_bytes - f.dst_byte_offset;
    if (!inside) {
      return invalid_argument(
          "fragment " + std::to_string(i) + " (" + std::to_string(f.bytes_per_page) +
          " bytes at source offset " + std::to_string(f.src_byte_offset) + ", source stride " +
          std::to_string(f.src_page_stride_bytes) + ", destination offset " +
          std::to_string(f.dst_byte_offset) + " of stride " +
          std::to_string(f.dst_page_stride_bytes) + ") does not stay inside one page of " +
          std::to_string(item) + " bytes");
    }
  }
  return Status();
}

// Fragments step by the real page strides: the prefill's own, and the decode's registered
// ones (KV pages and state slots alike). A decode fragment's byte range must lie inside
// the decode's item wherever the decode's pages are strided (the bytes between its pages
// are not the page's).
Status apply_page_strides(const KvArgs& prefill, const proto::BufferRegistration& reg,
                          std::vector<plan::Fragment>& fragments) {
  for (size_t i = 0; i < fragments.size(); ++i) {
    plan::Fragment& f = fragments[i];
    const bool state = plan::is_state_kind(f.kind);
    const auto b = static_cast<size_t>(f.buffer_index);  // checked: a prefill buffer
    f.src_page_stride_bytes = state ? prefill.state_page_stride(b) : prefill.kv_page_stride(b);
    const std::vector<uint64_t>& strides = state ? reg.state_page_strides : reg.kv_page_strides;
    const std::vector<uint64_t>& items = state ? reg.state.item_lens : reg.kv.item_lens;
    const uint64_t dst_stride = strides.empty() ? 0 : strides[b];
    if (dst_stride == 0) continue;
    if (b >= items.size() || f.dst_byte_offset > items[b] ||
        f.bytes_per_page > items[b] - f.dst_byte_offset) {
      return invalid_argument("fragment " + std::to_string(i) +
                              " does not stay inside one destination page of " +
                              (state ? "state" : "KV") + " buffer " + std::to_string(b));
    }
    f.dst_page_stride_bytes = dst_stride;
  }
  return Status();
}

}  // namespace pdkv::kv
