#include "plan/fragment_planner.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace pdkv::plan {
namespace {

// One prefill rank's share of a decode rank's heads: global heads [first, end).
struct Source {
  int64_t prefill_rank;
  int64_t first;
  int64_t end;
};

// A byte range of a page, relative to both sides' page starts.
struct Piece {
  uint64_t src_off;
  uint64_t dst_off;
  uint64_t bytes;
};

std::string num(int64_t v) { return std::to_string(v); }

bool is_draft(BufferKind k) { return k == BufferKind::kDraftK || k == BufferKind::kDraftV; }

const KvGeometry& geometry_of(const SideLayout& s, BufferKind k) {
  return is_draft(k) && s.draft ? *s.draft : s.target;
}

Status check_geometry(const KvGeometry& g, const char* side) {
  if (g.total_kv_heads < 1 || g.head_dim < 1 || g.dtype_bytes < 1) {
    return invalid_argument(std::string(side) +
                            ": total_kv_head_num, head_dim and dtype_bytes must be >= 1");
  }
  return Status();
}

// Bytes of one page of one rank holding `local_heads` heads.
Result<uint64_t> item_bytes(const KvGeometry& g, int64_t local_heads, int64_t page_size) {
  uint64_t r = static_cast<uint64_t>(local_heads);
  for (int64_t f : {page_size, g.head_dim, g.dtype_bytes}) {
    if (__builtin_mul_overflow(r, static_cast<uint64_t>(f), &r)) {
      return out_of_range("page item size overflows uint64");
    }
  }
  return r;
}

// Prefill rank that serves `head` to decode rank d.
int64_t source_rank(int64_t head, int64_t d, int64_t P, int64_t D, int64_t H) {
  if (H >= P) return head / (H / P);
  const int64_t group = P / H;  // replicas of this head: [head*group, (head+1)*group)
  return std::clamp(d * P / D, head * group, (head + 1) * group - 1);
}

Result<std::vector<Source>> sources_of(int64_t d, int64_t P, int64_t D, int64_t H) {
  PDKV_ASSIGN_OR_RETURN(HeadRange need, heads_of_rank(d, D, H));
  std::vector<Source> out;
  for (int64_t h = need.first; h < need.first + need.count; ++h) {
    const int64_t p = source_rank(h, d, P, D, H);
    if (!out.empty() && out.back().prefill_rank == p && out.back().end == h) {
      out.back().end = h + 1;
    } else {
      out.push_back(Source{p, h, h + 1});
    }
  }
  return out;
}

uint64_t element_offset(PageLayout layout, int64_t token, int64_t local_head, int64_t heads,
                        int64_t page_size, uint64_t head_bytes) {
  const uint64_t e = layout == PageLayout::kNHD
                         ? static_cast<uint64_t>(token * heads + local_head)
                         : static_cast<uint64_t>(local_head * page_size + token);
  return e * head_bytes;
}

// The byte ranges of a page that carry global heads [first, end) from a prefill rank
// whose heads start at p_first (p_heads local) to a decode rank whose heads start at
// d_first (d_heads local), merged wherever contiguous on both sides. Elements (one head
// of one token) are visited in the destination's memory order, which makes the merge
// maximal when both layouts agree.
std::vector<Piece> slice_pieces(const SideLayout& pre, const SideLayout& dec, const KvGeometry& g,
                                int64_t first, int64_t end, int64_t p_first, int64_t p_heads,
                                int64_t d_first, int64_t d_heads) {
  const int64_t S = pre.page_size;
  const uint64_t head_bytes = static_cast<uint64_t>(g.head_dim * g.dtype_bytes);
  std::vector<Piece> out;
  auto visit = [&](int64_t t, int64_t h) {
    const uint64_t so = element_offset(pre.page_layout, t, h - p_first, p_heads, S, head_bytes);
    const uint64_t dof = element_offset(dec.page_layout, t, h - d_first, d_heads, S, head_bytes);
    if (!out.empty() && out.back().src_off + out.back().bytes == so &&
        out.back().dst_off + out.back().bytes == dof) {
      out.back().bytes += head_bytes;
    } else {
      out.push_back(Piece{so, dof, head_bytes});
    }
  };
  if (dec.page_layout == PageLayout::kNHD) {
    for (int64_t t = 0; t < S; ++t)
      for (int64_t h = first; h < end; ++h) visit(t, h);
  } else {
    for (int64_t h = first; h < end; ++h)
      for (int64_t t = 0; t < S; ++t) visit(t, h);
  }
  return out;
}

Status check_sides(const SideLayout& pre, const SideLayout& dec, int64_t d) {
  if (pre.tp_size < 1 || dec.tp_size < 1) return invalid_argument("tp_size must be >= 1");
  if (d < 0 || d >= dec.tp_size) {
    return out_of_range("decode_rank " + num(d) + " outside tp_size " + num(dec.tp_size));
  }
  if (pre.page_size < 1 || pre.page_size != dec.page_size) {
    return invalid_argument("page_size must be >= 1 and equal on both sides (" +
                            num(pre.page_size) + " vs " + num(dec.page_size) + ")");
  }
  if (pre.is_mla != dec.is_mla) return invalid_argument("is_mla differs between the sides");
  if (pre.kv_buffer_kinds != dec.kv_buffer_kinds) {
    return invalid_argument("KV buffer kinds/order differ between the sides");
  }
  if (pre.state_item_lens.size() != dec.state_item_lens.size()) {
    return invalid_argument("state buffer counts differ between the sides");
  }
  for (const SideLayout* s : {&pre, &dec}) {
    const char* side = s == &pre ? "prefill" : "decode";
    PDKV_RETURN_IF_ERROR(check_geometry(s->target, side));
    if (s->draft) PDKV_RETURN_IF_ERROR(check_geometry(*s->draft, side));
    for (BufferKind k : s->kv_buffer_kinds) {
      if (k == BufferKind::kKv || k == BufferKind::kState) {
        return invalid_argument(std::string(side) +
                                ": KV buffer kinds must be target_k/target_v/draft_k/draft_v");
      }
    }
    if (s->is_mla &&
        (s->target.total_kv_heads != 1 || (s->draft && s->draft->total_kv_heads != 1))) {
      return invalid_argument(std::string(side) + ": MLA latent buffers have one KV head");
    }
    if (!s->kv_item_lens.empty() && s->kv_item_lens.size() != s->kv_buffer_kinds.size()) {
      return invalid_argument(std::string(side) +
                              ": kv_item_lens and buffer kinds differ in count");
    }
    if (!s->kv_page_strides.empty() && s->kv_page_strides.size() != s->kv_buffer_kinds.size()) {
      return invalid_argument(std::string(side) +
                              ": kv_page_strides and buffer kinds differ in count");
    }
  }
  for (bool draft : {false, true}) {
    const KvGeometry& a = draft && pre.draft ? *pre.draft : pre.target;
    const KvGeometry& b = draft && dec.draft ? *dec.draft : dec.target;
    if (a.total_kv_heads != b.total_kv_heads || a.head_dim != b.head_dim ||
        a.dtype_bytes != b.dtype_bytes) {
      return invalid_argument(
          "model geometry (heads, head_dim, dtype_bytes) differs between "
          "the sides");
    }
  }
  return Status();
}

Status check_state(const SideLayout& pre, const SideLayout& dec) {
  const int64_t P = pre.tp_size, D = dec.tp_size;
  for (size_t s = 0; s < pre.state_item_lens.size(); ++s) {
    const uint64_t ip = pre.state_item_lens[s], id = dec.state_item_lens[s];
    uint64_t lp, ld;
    const bool sharded = !__builtin_mul_overflow(ip, static_cast<uint64_t>(P), &lp) &&
                         !__builtin_mul_overflow(id, static_cast<uint64_t>(D), &ld) && lp == ld;
    if (ip == id || (P != D && sharded)) continue;
    return invalid_argument("state buffer " + num(static_cast<int64_t>(s)) + ": slot of " +
                            std::to_string(ip) + " bytes on TP " + num(P) +
                            " is neither replicated nor sharded into " + std::to_string(id) +
                            " bytes on TP " + num(D));
  }
  return Status();
}

// State fragments of decode rank d for state buffer s: the overlaps of its shard with
// the prefill shards, or one whole slot from rank d*P/D when replicated.
std::vector<Fragment> state_fragments(const SideLayout& pre, const SideLayout& dec, int64_t d,
                                      size_t s) {
  const int64_t P = pre.tp_size, D = dec.tp_size;
  const uint64_t ip = pre.state_item_lens[s], id = dec.state_item_lens[s];
  std::vector<Fragment> out;
  auto add = [&](int64_t p, uint64_t src_off, uint64_t dst_off, uint64_t bytes) {
    Fragment f;
    f.kind = BufferKind::kState;
    f.buffer_index = static_cast<int64_t>(s);
    f.src_page_stride_bytes = ip;
    f.dst_page_stride_bytes = id;
    f.src_byte_offset = src_off;
    f.dst_byte_offset = dst_off;
    f.bytes_per_page = bytes;
    f.src_rank = static_cast<int32_t>(p);
    f.dst_rank = static_cast<int32_t>(d);
    out.push_back(f);
  };
  if (ip == id) {
    add(d * P / D, 0, 0, ip);
    return out;
  }
  const uint64_t ds = static_cast<uint64_t>(d) * id, de = ds + id;
  for (int64_t p = 0; p < P; ++p) {
    const uint64_t ps = static_cast<uint64_t>(p) * ip, pe = ps + ip;
    const uint64_t is = std::max(ps, ds), ie = std::min(pe, de);
    if (is < ie) add(p, is - ps, is - ds, ie - is);
  }
  return out;
}

// Per decode rank, the set of prefill ranks it takes KV or state data from.
Result<std::set<int64_t>> real_targets(const SideLayout& pre, const SideLayout& dec, int64_t d) {
  std::set<int64_t> out;
  const int64_t P = pre.tp_size, D = dec.tp_size;
  for (BufferKind k : pre.kv_buffer_kinds) {
    PDKV_ASSIGN_OR_RETURN(auto srcs, sources_of(d, P, D, geometry_of(pre, k).total_kv_heads));
    for (const Source& s : srcs) out.insert(s.prefill_rank);
  }
  for (size_t s = 0; s < pre.state_item_lens.size(); ++s) {
    if (P == D) {
      out.insert(d);
      continue;
    }
    for (const Fragment& f : state_fragments(pre, dec, d, s)) out.insert(f.src_rank);
  }
  return out;
}

}  // namespace

Result<HeadRange> heads_of_rank(int64_t rank, int64_t tp, int64_t heads) {
  if (tp < 1 || heads < 1 || rank < 0 || rank >= tp) {
    return invalid_argument("bad head split: rank " + num(rank) + " of " + num(tp) + ", " +
                            num(heads) + " heads");
  }
  if (heads >= tp) {
    if (heads % tp != 0) {
      return invalid_argument(num(heads) + " KV heads do not split evenly over TP " + num(tp));
    }
    return HeadRange{rank * (heads / tp), heads / tp};
  }
  if (tp % heads != 0) {
    return invalid_argument("TP " + num(tp) + " is not a multiple of " + num(heads) +
                            " KV heads (GQA replica groups must be equal)");
  }
  return HeadRange{rank * heads / tp, 1};
}

Result<FragmentPlan> plan_fragments(const SideLayout& pre, const SideLayout& dec,
                                    int64_t decode_rank) {
  PDKV_RETURN_IF_ERROR(check_sides(pre, dec, decode_rank));
  const int64_t P = pre.tp_size, D = dec.tp_size, S = pre.page_size;

  // Item lengths of every KV buffer on both sides (and the check of given ones).
  const size_t nbuf = pre.kv_buffer_kinds.size();
  std::vector<uint64_t> item_p(nbuf), item_d(nbuf), stride_p(nbuf), stride_d(nbuf);
  for (size_t b = 0; b < nbuf; ++b) {
    const KvGeometry& g = geometry_of(pre, pre.kv_buffer_kinds[b]);
    PDKV_ASSIGN_OR_RETURN(HeadRange hp, heads_of_rank(0, P, g.total_kv_heads));
    PDKV_ASSIGN_OR_RETURN(HeadRange hd, heads_of_rank(0, D, g.total_kv_heads));
    PDKV_ASSIGN_OR_RETURN(item_p[b], item_bytes(g, hp.count, S));
    PDKV_ASSIGN_OR_RETURN(item_d[b], item_bytes(g, hd.count, S));
    if (!pre.kv_item_lens.empty() && pre.kv_item_lens[b] != item_p[b]) {
      return invalid_argument("prefill kv_item_lens[" + num(b) +
                              "] = " + std::to_string(pre.kv_item_lens[b]) + ", layout gives " +
                              std::to_string(item_p[b]));
    }
    if (!dec.kv_item_lens.empty() && dec.kv_item_lens[b] != item_d[b]) {
      return invalid_argument("decode kv_item_lens[" + num(b) +
                              "] = " + std::to_string(dec.kv_item_lens[b]) + ", layout gives " +
                              std::to_string(item_d[b]));
    }
    const uint64_t sp = pre.kv_page_strides.empty() ? 0 : pre.kv_page_strides[b];
    const uint64_t sd = dec.kv_page_strides.empty() ? 0 : dec.kv_page_strides[b];
    stride_p[b] = sp == 0 ? item_p[b] : sp;
    stride_d[b] = sd == 0 ? item_d[b] : sd;
    if (stride_p[b] < item_p[b] || stride_d[b] < item_d[b]) {
      return invalid_argument("kv_page_strides[" + num(static_cast<int64_t>(b)) +
                              "] is smaller than the page (" + std::to_string(stride_p[b]) + " / " +
                              std::to_string(stride_d[b]) + " bytes for pages of " +
                              std::to_string(item_p[b]) + " / " + std::to_string(item_d[b]) + ")");
    }
  }

  // State: with P == D whole slots come from the peer by the default path; otherwise every
  // state buffer gets fragments, sharded (item_p*P == item_d*D) or replicated (equal).
  PDKV_RETURN_IF_ERROR(check_state(pre, dec));

  // Fan-out over every decode rank, and the idle prefill ranks.
  std::vector<int32_t> fan_out(static_cast<size_t>(P), 0);
  std::set<int64_t> mine;
  for (int64_t d = 0; d < D; ++d) {
    PDKV_ASSIGN_OR_RETURN(auto t, real_targets(pre, dec, d));
    for (int64_t p : t) ++fan_out[static_cast<size_t>(p)];
    if (d == decode_rank) mine = std::move(t);
  }
  FragmentPlan plan;
  for (int64_t p = 0; p < P; ++p) {
    if (fan_out[static_cast<size_t>(p)] == 0)
      plan.idle_prefill_ranks.push_back(static_cast<int32_t>(p));
  }

  // This rank's fragments, per target.
  std::map<int64_t, PrefillTarget> targets;
  for (int64_t p : mine) {
    PrefillTarget& t = targets[p];
    t.prefill_rank = static_cast<int32_t>(p);
    t.required_dst_info_num = fan_out[static_cast<size_t>(p)];
  }
  for (size_t b = 0; b < nbuf; ++b) {
    const BufferKind kind = pre.kv_buffer_kinds[b];
    const KvGeometry& g = geometry_of(pre, kind);
    const int64_t H = g.total_kv_heads;
    PDKV_ASSIGN_OR_RETURN(auto srcs, sources_of(decode_rank, P, D, H));
    PDKV_ASSIGN_OR_RETURN(HeadRange dh, heads_of_rank(decode_rank, D, H));
    for (const Source& src : srcs) {
      PDKV_ASSIGN_OR_RETURN(HeadRange ph, heads_of_rank(src.prefill_rank, P, H));
      for (const Piece& pc :
           slice_pieces(pre, dec, g, src.first, src.end, ph.first, ph.count, dh.first, dh.count)) {
        Fragment f;
        f.kind = kind;
        f.buffer_index = static_cast<int64_t>(b);
        f.src_page_stride_bytes = stride_p[b];
        f.dst_page_stride_bytes = stride_d[b];
        f.src_byte_offset = pc.src_off;
        f.dst_byte_offset = pc.dst_off;
        f.bytes_per_page = pc.bytes;
        f.src_rank = static_cast<int32_t>(src.prefill_rank);
        f.dst_rank = static_cast<int32_t>(decode_rank);
        targets[src.prefill_rank].fragments.push_back(f);
      }
    }
  }
  for (size_t s = 0; s < pre.state_item_lens.size(); ++s) {
    if (P == D) {  // the default state path of our peer copies whole slots
      targets[decode_rank].send_state = true;
      continue;
    }
    for (const Fragment& f : state_fragments(pre, dec, decode_rank, s)) {
      targets[f.src_rank].fragments.push_back(f);
      targets[f.src_rank].send_state = true;
    }
  }

  // Identity: one target, our peer, every KV fragment a whole page on both sides.
  if (P == D && targets.size() == 1 && targets.begin()->first == decode_rank) {
    bool whole = true;
    // Whole pages (the item, whatever the stride): the default blocks copy those, with
    // the strides their buffer table gives.
    for (const Fragment& f : targets.begin()->second.fragments) {
      const auto b = static_cast<size_t>(f.buffer_index);
      whole = whole && !is_state_kind(f.kind) && f.src_byte_offset == 0 && f.dst_byte_offset == 0 &&
              f.bytes_per_page == item_p[b] && f.bytes_per_page == item_d[b];
    }
    if (whole) {
      plan.identity = true;
      targets.begin()->second.fragments.clear();
    }
  }
  for (auto& [p, t] : targets) {
    plan.targets.push_back(std::move(t));
    ++plan.required_prefill_response_num;
  }
  // Idle ranks learn from one decode rank each (p*D/P) that the room needs nothing.
  for (int32_t p : plan.idle_prefill_ranks) {
    if (static_cast<int64_t>(p) * D / P != decode_rank) continue;
    PrefillTarget t;
    t.prefill_rank = p;
    t.dummy = true;
    t.required_dst_info_num = 1;
    plan.targets.push_back(std::move(t));
  }
  std::sort(plan.targets.begin(), plan.targets.end(),
            [](const PrefillTarget& a, const PrefillTarget& b) {
              return a.prefill_rank < b.prefill_rank;
            });
  return plan;
}

}  // namespace pdkv::plan
