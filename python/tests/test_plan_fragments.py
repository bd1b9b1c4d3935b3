"""Byte-level property test of pdkv.plan.plan_fragments + kv_blocks/state_blocks.

Prefill TP ranks hold head slices of a full KV tensor (numpy), the planned blocks are
applied to decode ranks' zeroed buffers, and each decode rank must end with exactly its
heads at its pages, every byte written once, nothing else touched."""

import itertools

import numpy as np
import pytest

import pdkv.plan as plan
from pdkv.testing import heads_of

BUF_SHIFT = 32  # address = (side tag << 48) | (buffer << 32) | offset


def valid_split(tp, heads):
    return heads % tp == 0 if heads >= tp else tp % heads == 0


def page_bytes(full_pages, first, count, layout):
    """full_pages: (q, S, H, E) -> (q, item) for heads [first, first+count)."""
    part = full_pages[:, :, first:first + count, :]
    if layout == "HND":
        part = part.transpose(0, 2, 1, 3)
    return part.reshape(part.shape[0], -1)


class Side:
    def __init__(self, tag, tp, heads, head_bytes, S, layout, nbuf, pages_cap, state_items):
        self.tag, self.tp, self.layout = tag, tp, layout
        self.local = [heads_of(r, tp, heads) for r in range(tp)]
        self.item = self.local[0][1] * S * head_bytes
        self.bufs = [[np.zeros(pages_cap * self.item, np.uint8) for _ in range(nbuf)] for _ in range(tp)]
        self.state = [[np.zeros(4 * it, np.uint8) for it in state_items] for _ in range(tp)]

    def ptrs(self, rank, n, kind=0):
        return [(self.tag << 48) | ((kind * 1024 + b) << BUF_SHIFT) for b in range(n)]


def apply(blocks, src_side, src_rank, dst_side, dst_rank, written, state=False):
    for s, d, n in blocks.tolist():
        sb, so = (s >> BUF_SHIFT) & 0xFFFF, s & ((1 << BUF_SHIFT) - 1)
        db, do = (d >> BUF_SHIFT) & 0xFFFF, d & ((1 << BUF_SHIFT) - 1)
        assert (s >> 48) == src_side.tag and (d >> 48) == dst_side.tag
        if state:
            sb, db = sb - 1024, db - 1024
            src, dst = src_side.state[src_rank][sb], dst_side.state[dst_rank][db]
            w = written[("state", dst_rank, db)]
        else:
            src, dst = src_side.bufs[src_rank][sb], dst_side.bufs[dst_rank][db]
            w = written[("kv", dst_rank, db)]
        assert so + n <= src.size and do + n <= dst.size
        dst[do:do + n] = src[so:so + n]
        w[do:do + n] += 1


def layout_dict(tp, heads, head_dim, S, layout, nlayers, mla, state_items, draft_layers):
    layer_buffers = [[l] for l in range(nlayers)] if mla else [[l, nlayers + l] for l in range(nlayers)]
    return dict(tp_size=tp, total_kv_head_num=heads, head_dim=head_dim, dtype_bytes=2, page_size=S,
                page_layout=layout, is_mla=mla, layer_buffers=layer_buffers,
                target_layer_num=nlayers - draft_layers, state_item_lens=state_items)


def run_case(P, D, H, S, pre_layout, dec_layout, mla=False, state="none", seed=0, draft=0):
    rng = np.random.default_rng(seed)
    head_dim, nlayers, Q = 4, 2, 5
    E = head_dim * 2
    nbuf = nlayers if mla else 2 * nlayers
    Z = 48  # full state bytes per slot
    if state == "sharded":
        pre_state, dec_state = [Z // P], [Z // D]
    elif state == "replicated":
        pre_state, dec_state = [Z], [Z]
    else:
        pre_state = dec_state = []
    pre = Side(1, P, H, E, S, pre_layout, nbuf, 12, pre_state)
    dec = Side(2, D, H, E, S, dec_layout, nbuf, 16, dec_state)
    full = rng.integers(0, 256, (nbuf, Q, S, H, E), dtype=np.uint8)
    full_state = rng.integers(1, 256, Z, dtype=np.uint8)
    src_pages = [rng.choice(12, Q, replace=False) for _ in range(P)]
    dst_pages = [rng.choice(16, Q, replace=False) for _ in range(D)]
    src_slot = [int(rng.integers(4)) for _ in range(P)]
    dst_slot = [int(rng.integers(4)) for _ in range(D)]
    for p in range(P):
        first, count = pre.local[p]
        for b in range(nbuf):
            pages = page_bytes(full[b], first, count, pre_layout)
            buf = pre.bufs[p][b].reshape(12, pre.item)
            buf[src_pages[p]] = pages
        if pre_state:
            it = pre_state[0]
            part = full_state if state == "replicated" else full_state[p * it:(p + 1) * it]
            pre.state[p][0].reshape(4, it)[src_slot[p]] = part

    pre_l = layout_dict(P, H, head_dim, S, pre_layout, nlayers, mla, pre_state, draft)
    dec_l = layout_dict(D, H, head_dim, S, dec_layout, nlayers, mla, dec_state, draft)
    written = {}
    for d in range(D):
        for b in range(nbuf):
            written[("kv", d, b)] = np.zeros(dec.bufs[d][b].size, np.int32)
        for s in range(len(dec_state)):
            written[("state", d, s)] = np.zeros(dec.state[d][s].size, np.int32)

    fan = np.zeros(P, int)
    dummies = np.zeros(P, int)
    declared = {}
    layer_buffers = pre_l["layer_buffers"]
    for d in range(D):
        result = plan.plan_fragments(pre_l, dec_l, d)
        real = [t for t in result["targets"] if not t["dummy"]]
        assert result["required_prefill_response_num"] == len(real)
        for t in result["targets"]:
            p = t["prefill_rank"]
            declared.setdefault(p, set()).add(t["required_dst_info_num"])
            if t["dummy"]:
                dummies[p] += 1
                assert not t["fragments"] and p in result["idle_prefill_ranks"]
                continue
            fan[p] += 1
            frags = t["fragments"] or None
            assert bool(frags) != result["identity"]
            src_lens = [b.size for b in pre.bufs[p]]
            dst_lens = [b.size for b in dec.bufs[d]]
            blocks = plan.kv_blocks(pre.ptrs(p, nbuf), dec.ptrs(d, nbuf), [pre.item] * nbuf, layer_buffers,
                                    src_pages[p], dst_pages[d], 0, len(layer_buffers), frags,
                                    src_lens=src_lens, dst_lens=dst_lens)
            apply(blocks, pre, p, dec, d, written)
            if t["send_state"]:
                blocks = plan.state_blocks(pre.ptrs(p, len(pre_state), 1), dec.ptrs(d, len(dec_state), 1),
                                           pre_state, [src_slot[p]], [dst_slot[d]], fragments=frags,
                                           src_lens=[x.size for x in pre.state[p]],
                                           dst_lens=[x.size for x in dec.state[d]])
                apply(blocks, pre, p, dec, d, written, state=True)
    # Fan-out: every prefill rank hears from someone, and the declared numbers are right.
    for p in range(P):
        assert fan[p] + dummies[p] >= 1, f"prefill rank {p} would wait forever"
        assert declared[p] == {fan[p] + dummies[p]}
    # Bytes: each decode rank holds exactly its heads at its pages, written once.
    for d in range(D):
        first, count = dec.local[d]
        for b in range(nbuf):
            want = np.zeros((16, dec.item), np.uint8)
            want[dst_pages[d]] = page_bytes(full[b], first, count, dec_layout)
            np.testing.assert_array_equal(dec.bufs[d][b].reshape(16, dec.item), want)
            w = written[("kv", d, b)].reshape(16, dec.item)
            assert (w[dst_pages[d]] == 1).all() and w.sum() == Q * dec.item
        if dec_state:
            it = dec_state[0]
            want = full_state if state == "replicated" else full_state[d * it:(d + 1) * it]
            np.testing.assert_array_equal(dec.state[d][0].reshape(4, it)[dst_slot[d]], want)
            assert written[("state", d, 0)].sum() == it


TP_PAIRS = [(1, 1), (1, 2), (2, 1), (2, 2), (2, 4), (4, 2), (1, 8), (8, 1), (4, 8), (8, 2), (3, 6), (6, 3)]


@pytest.mark.parametrize("P,D", TP_PAIRS)
@pytest.mark.parametrize("H", [1, 2, 6, 8])
@pytest.mark.parametrize("S", [1, 3])
@pytest.mark.parametrize("layouts", [("NHD", "NHD"), ("HND", "HND"), ("NHD", "HND")])
def test_heads_arrive_byte_exact(P, D, H, S, layouts):
    if not (valid_split(P, H) and valid_split(D, H)):
        with pytest.raises(ValueError):
            run_case(P, D, H, S, *layouts)
        return
    run_case(P, D, H, S, *layouts, seed=P * 100 + D * 10 + H + S)


@pytest.mark.parametrize("P,D", [(1, 2), (2, 1), (2, 4), (4, 2), (1, 8), (8, 2), (2, 2)])
@pytest.mark.parametrize("S", [1, 4])
def test_mla_latent_copied_whole(P, D, S):
    run_case(P, D, 1, S, "NHD", "NHD", mla=True, seed=P + D + S)
    result = plan.plan_fragments(layout_dict(P, 1, 4, S, "NHD", 2, True, [], 0),
                                 layout_dict(D, 1, 4, S, "NHD", 2, True, [], 0), D - 1)
    real = [t for t in result["targets"] if not t["dummy"]]
    assert [t["prefill_rank"] for t in real] == [(D - 1) * P // D]
    for f in real[0]["fragments"]:
        assert f["bytes_per_page"] == f["src_page_stride_bytes"] == f["dst_page_stride_bytes"]


@pytest.mark.parametrize("P,D", [(1, 2), (2, 1), (2, 4), (4, 2), (2, 2), (1, 4)])
@pytest.mark.parametrize("state", ["sharded", "replicated"])
def test_state_buffers(P, D, state):
    if state == "sharded" and P == D:
        state = "replicated"
    run_case(P, D, 8, 2, "NHD", "NHD", state=state, seed=P * 3 + D)


@pytest.mark.parametrize("P,D", [(2, 4), (4, 2), (2, 2)])
def test_draft_layers(P, D):
    run_case(P, D, 4, 2, "HND", "HND", draft=1, seed=7)


def test_nhd_partial_heads_emit_one_fragment_per_token():
    """Token-major pages need per-token ranges (the reference copied one range per page,
    tokens instead of heads); head-major need one."""
    for layout, want in (("NHD", 4), ("HND", 1)):
        result = plan.plan_fragments(layout_dict(2, 8, 128, 4, layout, 1, False, [], 0),
                                     layout_dict(4, 8, 128, 4, layout, 1, False, [], 0), 1)
        (target,) = result["targets"]
        frags = [f for f in target["fragments"] if f["buffer_index"] == 0]
        assert len(frags) == want
        assert sum(f["bytes_per_page"] for f in frags) == 2 * 4 * 128 * 2
        if layout == "NHD":
            assert [f["src_byte_offset"] for f in frags] == [512 + t * 1024 for t in range(4)]
            assert [f["dst_byte_offset"] for f in frags] == [t * 512 for t in range(4)]


def test_gqa_replicas_name_idle_prefill_ranks():
    """2 KV heads over prefill TP 8: ranks holding replicas must hear the room needs nothing."""
    pre = layout_dict(8, 2, 16, 1, "NHD", 1, False, [], 0)
    dec = layout_dict(2, 2, 16, 1, "NHD", 1, False, [], 0)
    seen = {}
    for d in range(2):
        r = plan.plan_fragments(pre, dec, d)
        assert r["idle_prefill_ranks"] == [1, 2, 3, 5, 6, 7]
        for t in r["targets"]:
            seen[t["prefill_rank"]] = t["dummy"]
    assert seen == {0: False, 4: False, 1: True, 2: True, 3: True, 5: True, 6: True, 7: True}


def test_identity_has_no_fragments():
    r = plan.plan_fragments(layout_dict(4, 8, 16, 2, "NHD", 2, False, [], 0),
                            layout_dict(4, 8, 16, 2, "NHD", 2, False, [], 0), 3)
    assert r["identity"] and r["targets"] == [
        {"prefill_rank": 3, "dummy": False, "send_state": False, "required_dst_info_num": 1, "fragments": []}]


@pytest.mark.parametrize("change", [
    dict(decode_rank=4), dict(page_size=2), dict(is_mla=True), dict(total_kv_head_num=6),
    dict(page_layout="XYZ"), dict(tp_size=0), dict(kv_item_lens=[1, 2]), dict(state_item_lens=[7]),
])
def test_plan_fragments_rejects(change):
    pre = layout_dict(2, 8, 16, 1, "NHD", 1, False, [], 0)
    dec = layout_dict(4, 8, 16, 1, "NHD", 1, False, [], 0)
    rank = change.pop("decode_rank", 0)
    dec.update(change)
    with pytest.raises(ValueError):
        plan.plan_fragments(pre, dec, rank)
