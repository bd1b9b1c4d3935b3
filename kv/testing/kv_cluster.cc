#include "kv/testing/kv_cluster.h"

namespace pdkv::kv::testing {

RankBuffers::RankBuffers(const ModelShape& shape, int64_t tp_size, int64_t tp_rank,
                         int64_t num_pages)
    : shape_(shape), tp_size_(tp_size) {
  const int64_t H = shape.is_mla ? 1 : shape.total_kv_heads;
  if (shape.is_mla) {
    heads_ = 1;
    first_head_ = 0;
  } else if (H >= tp_size) {
    heads_ = H / tp_size;
    first_head_ = tp_rank * heads_;
  } else {
    heads_ = 1;
    first_head_ = tp_rank * H / tp_size;
  }
  item_bytes_ =
      static_cast<uint64_t>(shape.page_size * heads_ * shape.head_dim * shape.dtype_bytes);
  const int64_t nbuf = shape.is_mla ? shape.layers : 2 * shape.layers;
  buffers_.assign(static_cast<size_t>(nbuf),
                  std::vector<uint8_t>(item_bytes_ * static_cast<uint64_t>(num_pages), 0));
}

KvArgs RankBuffers::args(int64_t engine_rank, int64_t dp_size) const {
  KvArgs a;
  a.engine_rank = engine_rank;
  a.tp_size = tp_size_;
  a.dp_size = dp_size;
  a.page_size = shape_.page_size;
  for (const auto& b : buffers_) {
    a.kv_data_ptrs.push_back(reinterpret_cast<uint64_t>(b.data()));
    a.kv_data_lens.push_back(b.size());
    a.kv_item_lens.push_back(item_bytes_);
  }
  for (int64_t l = 0; l < shape_.layers; ++l) {
    if (shape_.is_mla) {
      a.layer_buffers.push_back({l});
    } else {
      a.layer_buffers.push_back({l, shape_.layers + l});
    }
  }
  a.kv_head_num = heads_;
  a.total_kv_head_num = shape_.is_mla ? 1 : shape_.total_kv_heads;
  a.head_dim = shape_.head_dim;
  a.dtype_bytes = shape_.dtype_bytes;
  a.page_layout = shape_.layout;
  a.is_mla = shape_.is_mla;
  return a;
}

uint8_t& RankBuffers::at(size_t b, int64_t page, int64_t token, int64_t head, int64_t byte) {
  const int64_t local_head = head - first_head_;
  const int64_t head_bytes = shape_.head_dim * shape_.dtype_bytes;
  int64_t offset;
  if (shape_.layout == proto::PageLayout::kNHD) {
    offset = (token * heads_ + local_head) * head_bytes + byte;
  } else {
    offset = (local_head * shape_.page_size + token) * head_bytes + byte;
  }
  return buffers_[b][static_cast<size_t>(page) * item_bytes_ + static_cast<size_t>(offset)];
}

void RankBuffers::fill_request(const std::vector<int64_t>& pages, int64_t salt) {
  const int64_t head_bytes = shape_.head_dim * shape_.dtype_bytes;
  for (size_t b = 0; b < buffers_.size(); ++b) {
    for (size_t i = 0; i < pages.size(); ++i) {
      for (int64_t t = 0; t < shape_.page_size; ++t) {
        for (int64_t h = first_head_; h < first_head_ + heads_; ++h) {
          for (int64_t x = 0; x < head_bytes; ++x) {
            at(b, pages[i], t, h, x) = pattern_value(b, static_cast<int64_t>(i), t, h, x, salt);
          }
        }
      }
    }
  }
}

bool RankBuffers::holds_request(const std::vector<int64_t>& pages, size_t first, int64_t salt) {
  const int64_t head_bytes = shape_.head_dim * shape_.dtype_bytes;
  for (size_t b = 0; b < buffers_.size(); ++b) {
    for (size_t i = first; i < pages.size(); ++i) {
      for (int64_t t = 0; t < shape_.page_size; ++t) {
        for (int64_t h = first_head_; h < first_head_ + heads_; ++h) {
          for (int64_t x = 0; x < head_bytes; ++x) {
            if (at(b, pages[i], t, h, x) !=
                pattern_value(b, static_cast<int64_t>(i), t, h, x, salt)) {
              return false;
            }
          }
        }
      }
    }
  }
  return true;
}

}  // namespace pdkv::kv::testing
