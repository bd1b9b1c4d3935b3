"""pdkv.plan.kv_blocks / state_blocks against the reference transcription (after merging)."""

import numpy as np
import pytest

import pdkv.plan as plan
import reference_plan as ref
from test_plan_indices import random_pages

U64 = 2**64


def random_fragment(rng, nbuf, kinds=("kv", "target_k", "target_v", "draft_k", "state", "mamba_state")):
    item = int(rng.integers(1, 5)) * 64
    off = int(rng.integers(0, item // 2))
    return {
        "buffer_kind": kinds[int(rng.integers(len(kinds)))],
        "buffer_index": int(rng.integers(nbuf)),
        "src_page_stride_bytes": item,
        "dst_page_stride_bytes": int(rng.choice([item, item // 2, item * 2])),
        "src_byte_offset": off,
        "dst_byte_offset": int(rng.integers(0, item // 2)),
        "bytes_per_page": int(rng.choice([item, item // 2, item - off, 16])),
        "page_count": None if rng.random() < 0.6 else int(rng.integers(0, 4)),
    }


def random_kv_case(rng):
    nlayers = int(rng.integers(1, 6))
    mla = rng.random() < 0.3
    per = 1 if mla else 2
    nbuf = nlayers * per
    layer_buffers = [[l] for l in range(nlayers)] if mla else [[l, nlayers + l] for l in range(nlayers)]
    base = int(rng.choice([0, 2**40, 2**63 + 2**40]))
    src_ptrs = [base + b * 2**32 for b in range(nbuf)]
    dst_ptrs = [2**41 + b * 2**32 for b in range(nbuf)]
    item_lens = [int(rng.integers(0, 5)) * 128 for _ in range(nbuf)]
    n = int(rng.integers(0, 30))
    src, dst = random_pages(rng, n), random_pages(rng, n, 0, 300)
    begin = int(rng.integers(0, nlayers + 1))
    end = int(rng.integers(begin, nlayers + 1))
    fragments = None
    r = rng.random()
    if r < 0.5:
        fragments = [random_fragment(rng, nbuf) for _ in range(int(rng.integers(0, 6)))]
    return src_ptrs, dst_ptrs, item_lens, layer_buffers, src, dst, begin, end, fragments


def as_rows(a):
    assert a.dtype == np.uint64 and a.ndim == 2 and a.shape[1] == 3
    return [tuple(int(x) for x in r) for r in a.tolist()]


@pytest.mark.parametrize("seed", range(400))
def test_kv_blocks_match_reference(seed):
    rng = np.random.default_rng(seed)
    args = random_kv_case(rng)
    want = ref.merge_blocks(ref.kv_blocks(*args))
    got = plan.kv_blocks(*args)
    assert ref.merge_blocks(as_rows(got)) == want
    # Already merged: merging again changes nothing.
    assert as_rows(got) == ref.merge_blocks(as_rows(got))


@pytest.mark.parametrize("seed", range(100))
def test_kv_blocks_bounds_are_enforced(seed):
    rng = np.random.default_rng(1000 + seed)
    args = random_kv_case(rng)
    src_ptrs, dst_ptrs = args[0], args[1]
    blocks = ref.kv_blocks(*args)
    if not blocks:
        return
    nbuf = len(src_ptrs)
    need_src, need_dst = [0] * nbuf, [0] * nbuf
    for s, d, n in blocks:
        b = next(i for i in range(nbuf) if src_ptrs[i] <= s < src_ptrs[i] + 2**32)
        need_src[b] = max(need_src[b], s + n - src_ptrs[b])
        need_dst[b] = max(need_dst[b], d + n - dst_ptrs[b])
    got = plan.kv_blocks(*args, src_lens=need_src, dst_lens=need_dst)
    assert ref.merge_blocks(as_rows(got)) == ref.merge_blocks(blocks)
    # The buffer that needs the most made one byte short, on either side: refused.
    lens = {"src_lens": need_src, "dst_lens": need_dst}
    for side, need in lens.items():
        b = int(np.argmax(need))
        if need[b] > 0:
            short = list(need)
            short[b] -= 1
            with pytest.raises(ValueError):
                plan.kv_blocks(*args, **dict(lens, **{side: short}))


def test_kv_blocks_default_runs_and_dtype():
    got = plan.kv_blocks([1000, 2000], [5000, 6000], [10, 10], [[0, 1]], [0, 1, 2, 5], [3, 4, 5, 9], 0, 1)
    assert as_rows(got) == [(1000, 5030, 30), (1050, 5090, 10), (2000, 6030, 30), (2050, 6090, 10)]
    e = plan.kv_blocks([1], [2], [3], [[0]], [], [], 0, 1)
    assert e.shape == (0, 3) and e.dtype == np.uint64


def test_kv_blocks_merges_fragment_pages_that_continue():
    frag = {"buffer_kind": "kv", "buffer_index": 0, "src_page_stride_bytes": 64, "dst_page_stride_bytes": 64,
            "src_byte_offset": 0, "dst_byte_offset": 0, "bytes_per_page": 64, "page_count": None}
    got = plan.kv_blocks([0], [10**6], [64], [[0]], np.arange(100), np.arange(100), 0, 1, [frag])
    assert as_rows(got) == [(0, 10**6, 6400)]


def test_kv_blocks_state_only_fragments_skip_kv():
    frag = {"buffer_kind": "state", "buffer_index": 0, "src_page_stride_bytes": 1, "dst_page_stride_bytes": 1,
            "src_byte_offset": 0, "dst_byte_offset": 0, "bytes_per_page": 1, "page_count": None}
    assert plan.kv_blocks([0], [0], [8], [[0]], [1], [1], 0, 1, [frag]).shape == (0, 3)
    assert plan.kv_blocks([0], [0], [8], [[0]], [1], [1], 0, 1, []).shape == (1, 3)


def test_kv_blocks_large_pointers():
    top = 2**64 - 4096
    got = plan.kv_blocks(np.array([top], np.uint64), [0], [1024], [[0]], [1, 2], [0, 1], 0, 1)
    assert as_rows(got) == [(top + 1024, 0, 2048)]


@pytest.mark.parametrize("change", [
    dict(src_pages=[0, 1], dst_pages=[0]),            # length mismatch
    dict(src_pages=[-1], dst_pages=[0]),              # negative page
    dict(dst_pages=[-3], src_pages=[0]),
    dict(end_layer=3),                                # past the layers
    dict(begin_layer=-1),
    dict(layer_buffers=[[0, 5]]),                     # buffer index out of range
    dict(dst_ptrs=[1]),                               # buffer counts differ
    dict(item_lens=[8]),
    dict(src_ptrs=[-1, 2]),                           # negative pointer
    dict(src_ptrs=[2**64 - 8, 0]),                    # address overflow
    dict(src_pages=[2**62], dst_pages=[0]),           # offset overflow
    dict(fragments=[{"buffer_kind": "kv"}]),          # incomplete fragment
    dict(fragments=[{"buffer_kind": "xx", "buffer_index": 0, "src_page_stride_bytes": 8,
                     "dst_page_stride_bytes": 8, "src_byte_offset": 0, "dst_byte_offset": 0,
                     "bytes_per_page": 8}]),
    dict(fragments=[{"buffer_kind": "kv", "buffer_index": 9, "src_page_stride_bytes": 8,
                     "dst_page_stride_bytes": 8, "src_byte_offset": 0, "dst_byte_offset": 0,
                     "bytes_per_page": 8}]),
    dict(fragments=[{"buffer_kind": "kv", "buffer_index": 0, "src_page_stride_bytes": 8,
                     "dst_page_stride_bytes": 8, "src_byte_offset": 0, "dst_byte_offset": 0,
                     "bytes_per_page": 8, "page_count": -1}]),
    dict(src_pages=[0.5], dst_pages=[1]),
    dict(src_lens=[8]),
])
def test_kv_blocks_rejects(change):
    args = dict(src_ptrs=[0, 4096], dst_ptrs=[8192, 12288], item_lens=[8, 8], layer_buffers=[[0, 1]],
                src_pages=[0, 1], dst_pages=[2, 3], begin_layer=0, end_layer=1, fragments=None)
    args.update(change)
    with pytest.raises(ValueError):
        plan.kv_blocks(**args)


def test_kv_blocks_reversed_layer_range_is_empty():
    assert plan.kv_blocks([0], [0], [8], [[0]], [1], [1], 1, 0).shape == (0, 3)


# ---- state_blocks ---------------------------------------------------------------------------

def random_state_case(rng):
    nbuf = int(rng.integers(0, 5))
    src_ptrs = [2**36 * (b + 1) for b in range(nbuf)]
    dst_ptrs = [2**50 + 2**36 * b for b in range(nbuf)]
    if rng.random() < 0.1:
        dst_ptrs = dst_ptrs + [7]
    item_lens = [int(rng.integers(1, 5)) * 1024 for _ in range(nbuf)]
    nd = int(rng.integers(0, 5))
    dst_slots = rng.integers(-2, 20, nd).tolist()
    r = rng.random()
    if r < 0.3:
        src_slots = [int(rng.integers(-1, 20))]
    elif r < 0.4:
        src_slots = rng.integers(-2, 20, nd + 1).tolist()
    else:
        src_slots = rng.integers(-2, 20, nd).tolist()
    if rng.random() < 0.1:
        src_slots = None
    ids = sorted(rng.choice(40, nbuf, replace=False).tolist()) if nbuf else []
    if rng.random() < 0.1:
        ids = ids[:-1]
    begin = end = None
    if rng.random() < 0.6:
        begin = None if rng.random() < 0.2 else int(rng.integers(0, 40))
        end = None if rng.random() < 0.2 else int(rng.integers(0, 45))
    fragments = None
    if rng.random() < 0.4 and nbuf:
        fragments = [random_fragment(rng, nbuf) for _ in range(int(rng.integers(1, 4)))]
    return src_ptrs, dst_ptrs, item_lens, src_slots, dst_slots, ids, begin, end, fragments


@pytest.mark.parametrize("seed", range(400))
def test_state_blocks_match_reference(seed):
    rng = np.random.default_rng(seed)
    args = random_state_case(rng)
    try:
        want = ref.state_blocks(*args)
    except ref.Rejected:
        with pytest.raises(ValueError):
            plan.state_blocks(*args)
        return
    got = plan.state_blocks(*args)
    assert ref.merge_blocks(as_rows(got)) == ref.merge_blocks(want)


def test_state_blocks_broadcast_and_negative_slots():
    got = plan.state_blocks([100], [200], [8], [3], [1, 2, -1, 4])
    assert as_rows(got) == [(124, 208, 8), (124, 216, 8), (124, 232, 8)]
    assert plan.state_blocks([100], [200], [8], [-1], [1, 2]).shape == (0, 3)


def test_state_blocks_layer_range():
    ptrs, dptrs, items, ids = [0, 1000, 2000], [5000, 6000, 7000], [10, 10, 10], [1, 5, 9]
    got = plan.state_blocks(ptrs, dptrs, items, [2], [3], ids, 4, 10)
    assert as_rows(got) == [(1020, 6030, 10), (2020, 7030, 10)]
    got = plan.state_blocks(ptrs, dptrs, items, [2], [3], ids, 4, None)
    assert len(got) == 2
    assert plan.state_blocks(ptrs, dptrs, items, [2], [3], ids, 10, 20).shape == (0, 3)
    with pytest.raises(ValueError):
        plan.state_blocks(ptrs, dptrs, items, [2], [3], [1, 5], 0, 10)
    with pytest.raises(ValueError):
        plan.state_blocks(ptrs, dptrs, items, [2], [3], None, 0, 10)
    # Without a range the ids are not needed.
    assert len(plan.state_blocks(ptrs, dptrs, items, [2], [3])) == 3


def test_state_blocks_missing_inputs_are_skipped_and_mismatches_rejected():
    assert plan.state_blocks([], [1], [], [1], [1]).shape == (0, 3)
    assert plan.state_blocks([1], [1], [8], None, [1]).shape == (0, 3)
    with pytest.raises(ValueError):
        plan.state_blocks([1, 2], [1], [8, 8], [1], [1])
    with pytest.raises(ValueError):
        plan.state_blocks([1], [1], [8], [1, 2], [1])
    with pytest.raises(ValueError):
        plan.state_blocks([1], [1], [8], [1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        plan.state_blocks([1], [1], [8], [1], [2], src_lens=[8], dst_lens=[16])


def test_state_fragments_apply_only_to_their_buffer():
    frag = {"buffer_kind": "mamba_state", "buffer_index": 1, "src_page_stride_bytes": 100,
            "dst_page_stride_bytes": 50, "src_byte_offset": 50, "dst_byte_offset": 0,
            "bytes_per_page": 50, "page_count": None}
    got = plan.state_blocks([0, 10**6], [10**7, 2 * 10**7], [100, 100], [1], [2, 3], fragments=[frag])
    assert as_rows(got) == [(10**6 + 150, 2 * 10**7 + 100, 50), (10**6 + 150, 2 * 10**7 + 150, 50)]


# ---- layerwise composition for hybrid models ------------------------------------------------

@pytest.mark.parametrize("interval", [1, 2, 3, 5])
def test_layerwise_hybrid_matches_reference(interval):
    """Global layers 0..7, KV only on 1, 3, 4, 7 (kv_layer_ids), state on the others."""
    rng = np.random.default_rng(interval)
    kv_layer_ids = [1, 3, 4, 7]
    state_layer_ids = [0, 2, 5, 6]
    layer_num = max(kv_layer_ids + state_layer_ids) + 1
    layer_buffers = [[j, 4 + j] for j in range(4)]
    src_ptrs = [2**40 + b * 2**30 for b in range(8)]
    dst_ptrs = [2**42 + b * 2**30 for b in range(8)]
    items = [256] * 8
    sptr = [2**44 + s * 2**30 for s in range(4)]
    dptr = [2**45 + s * 2**30 for s in range(4)]
    sitems = [4096] * 4
    src, dst = random_pages(rng, 20), random_pages(rng, 20, 0, 100)
    to_index = {g: j for j, g in enumerate(kv_layer_ids)}
    begin_step = 1000
    for g0, g1, wait in plan.layer_groups(layer_num, interval, begin_step).tolist():
        assert wait == begin_step + g1 - 1
        got, want = [], []
        sb, db = ref.group_concurrent_contiguous(src, dst)
        for g in range(g0, g1):
            j = to_index.get(g)
            if j is None:
                continue
            got += as_rows(plan.kv_blocks(src_ptrs, dst_ptrs, items, layer_buffers, src, dst, j, j + 1))
            want += ref.layer_transfer_blocks(src_ptrs, dst_ptrs, items, layer_buffers, sb, db, j, j + 1)
        got += as_rows(plan.state_blocks(sptr, dptr, sitems, [3], [5, 6], state_layer_ids, g0, g1))
        want += ref.state_blocks(sptr, dptr, sitems, [3], [5, 6], state_layer_ids, g0, g1, layer_num=layer_num)
        assert ref.merge_blocks(got) == ref.merge_blocks(want)


def test_fragments_may_be_objects_with_enum_kinds():
    import enum
    import types

    class BufferKind(str, enum.Enum):
        TARGET_K = "target_k"
        MAMBA_STATE = "mamba_state"

    f = types.SimpleNamespace(buffer_kind=BufferKind.TARGET_K, buffer_index=0, src_page_stride_bytes=16,
                              dst_page_stride_bytes=8, src_byte_offset=8, dst_byte_offset=0,
                              bytes_per_page=8, page_count=None, src_rank=0, dst_rank=1)
    got = plan.kv_blocks([0], [1000], [16], [[0]], [0, 1], [3, 4], 0, 1, (f,))
    assert as_rows(got) == [(8, 1024, 8), (24, 1032, 8)]
    g = dict(vars(f), buffer_kind="MAMBA_STATE")
    assert plan.kv_blocks([0], [1000], [16], [[0]], [0], [3], 0, 1, [g]).shape == (0, 3)


def test_state_slots_may_be_scalars():
    assert as_rows(plan.state_blocks([100], [200], [8], np.int64(3), [1, 2])) == [(124, 208, 8), (124, 216, 8)]
    assert as_rows(plan.state_blocks([100], [200], [8], 3, 4)) == [(124, 232, 8)]
