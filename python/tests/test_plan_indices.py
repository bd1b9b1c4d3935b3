"""pdkv.plan.coalesce / resolve_indices / layer_groups against the reference transcription."""

import numpy as np
import pytest

import pdkv.plan as plan
import reference_plan as ref

RNG_SEEDS = range(300)


def random_pages(rng, n, lo=0, hi=200):
    """Page lists mixing contiguous runs, shuffles and repeats."""
    style = rng.integers(4)
    if style == 0:
        return np.arange(lo, lo + n, dtype=np.int64)
    if style == 1:
        return rng.permutation(np.arange(lo, lo + n)).astype(np.int64)
    if style == 2:
        return rng.integers(lo, hi, n).astype(np.int64)
    out, cur = [], int(rng.integers(lo, hi))
    while len(out) < n:
        run = int(rng.integers(1, 6))
        out.extend(range(cur, cur + run))
        cur = int(rng.integers(lo, hi))
    return np.array(out[:n], dtype=np.int64)


# ---- coalesce -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_coalesce_matches_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    src, dst = random_pages(rng, n), random_pages(rng, n)
    got = plan.coalesce(src, dst)
    assert got.dtype == np.int64 and got.shape == (len(ref.coalesce(src, dst)), 3)
    assert [tuple(r) for r in got.tolist()] == ref.coalesce(src, dst)


def test_coalesce_accepts_int32_lists_and_empty():
    assert plan.coalesce(np.array([3, 4], np.int32), [7, 8]).tolist() == [[3, 7, 2]]
    e = plan.coalesce([], [])
    assert e.shape == (0, 3) and e.dtype == np.int64
    assert plan.coalesce(np.array([], np.int32), np.array([], np.int64)).shape == (0, 3)


def test_coalesce_steps_on_both_sides():
    assert plan.coalesce([1, 2, 3], [5, 6, 8]).tolist() == [[1, 5, 2], [3, 8, 1]]
    assert plan.coalesce([1, 1], [2, 3]).tolist() == [[1, 2, 1], [1, 3, 1]]
    big = np.iinfo(np.int64).max
    assert plan.coalesce([big - 1, big], [0, 1]).tolist() == [[big - 1, 0, 2]]


@pytest.mark.parametrize("bad", [([1, 2], [1]), ([], [1]), ([1.5], [1]), ([[1]], [[1]]),
                                 ([True], [False]), (["a"], ["b"])])
def test_coalesce_rejects(bad):
    with pytest.raises(ValueError):
        plan.coalesce(*bad)


# ---- resolve_indices ------------------------------------------------------------------------

def random_src_l15(rng, n_src):
    if rng.random() < 0.15:  # a deliberately wrong mask length
        n_src = max(0, n_src + int(rng.integers(-2, 3)))
    mask = rng.random(n_src) < 0.6
    local = rng.integers(0, 500, int(mask.sum())).astype(np.int64)
    if rng.random() < 0.1 and local.size:
        local = local[:-1]  # too short: reference index error
    return mask, local


def random_dst_l15(rng, n_req):
    if rng.random() < 0.1:  # a mask not covering exactly the request's pages
        n_req = max(0, n_req + int(rng.integers(-2, 3)))
    mask = rng.random(n_req) < 0.6
    mapping = (np.cumsum(mask) - 1).astype(np.int64)
    local = rng.integers(0, 500, int(mask.sum())).astype(np.int64)
    if rng.random() < 0.1 and local.size:
        local = local[:-1]
    return mask, mapping, local


def call_both(args):
    try:
        want = ref.resolve_indices(*args)
    except Exception:  # noqa: BLE001 - any reference failure must be a ValueError here
        with pytest.raises(ValueError):
            plan.resolve_indices(*args)
        return None
    if len(want[0]) != len(want[1]):
        # The reference pairs unequal lists (ON/OFF with a local list not holding one page
        # per owned page) and its block planner stops at the shorter: a silently wrong
        # plan, which pdkv refuses (docs/API.md).
        with pytest.raises(ValueError):
            plan.resolve_indices(*args)
        return None
    got = plan.resolve_indices(*args)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and g.ndim == 1
        assert g.tolist() == np.asarray(w).tolist()
    return got


@pytest.mark.parametrize("mode", ["OFF/OFF", "ON/OFF", "OFF/ON", "ON/ON"])
@pytest.mark.parametrize("seed", range(250))
def test_resolve_matches_reference(mode, seed):
    rng = np.random.default_rng(seed * 7 + len(mode))
    n_req = int(rng.integers(0, 30))
    dst = random_pages(rng, n_req, 100, 400)
    start = int(rng.integers(0, n_req + 1))
    stop = int(rng.integers(start, n_req + 3))  # may run past the end
    chunk = stop - start + int(rng.integers(-3, 4))  # mismatched lengths on purpose
    src = random_pages(rng, max(chunk, 0))
    src_l15 = random_src_l15(rng, len(src)) if mode.startswith("ON") else None
    dst_l15 = random_dst_l15(rng, n_req) if mode.endswith("/ON") else None
    call_both((src, dst, start, stop, src_l15, dst_l15))


def test_resolve_off_off_truncates_to_shorter():
    s, d = plan.resolve_indices([1, 2, 3, 4], [9, 8, 7, 6, 5], 1, 4)
    assert s.tolist() == [1, 2, 3] and d.tolist() == [8, 7, 6]
    s, d = plan.resolve_indices([1, 2], [9, 8, 7, 6, 5], 0, 5)
    assert s.tolist() == [1, 2] and d.tolist() == [9, 8]


def test_resolve_empty_chunk_ignores_metadata():
    s, d = plan.resolve_indices([], [1, 2], 0, 2, (None, None), (None, None, None))
    assert s.shape == (0,) and d.shape == (0,) and s.dtype == np.int64


def test_resolve_on_off_uses_local_pages():
    s, d = plan.resolve_indices([10, 11, 12], [5, 6, 7], 0, 3, ([True, False, True], [40, 42]))
    assert s.tolist() == [40, 42] and d.tolist() == [5, 7]


@pytest.mark.parametrize("mask,local", [
    ([True, False, True], [40]),          # fewer local pages than owned ones
    ([True, False, True], [40, 41, 42]),  # more
    ([False, False, False], [40]),        # owns nothing, names a page
    ([], [40]),                           # an empty mask selects nothing (numpy)
    (np.array([1, 0, 1], np.int8), np.array([40], np.int32)),
])
def test_resolve_on_off_rejects_local_pages_not_matching_the_mask(mask, local):
    with pytest.raises(ValueError, match="page_local_indices"):
        plan.resolve_indices([10, 11, 12], [5, 6, 7], 0, 3, (mask, local))


def test_resolve_on_off_owning_nothing_gives_nothing():
    s, d = plan.resolve_indices([10, 11], [5, 6], 0, 2, ([False, False], []))
    assert s.tolist() == [] and d.tolist() == []
    s, d = plan.resolve_indices([10, 11], [5, 6], 0, 2, ([], np.array([], np.int32)))
    assert s.tolist() == [] and d.tolist() == []


def test_resolve_on_off_checks_against_the_truncated_chunk():
    # dst slice shorter than the chunk: the mask must cover the n = 2 resolved pages and
    # the local list one page per owned page among them.
    s, d = plan.resolve_indices([10, 11, 12], [5, 6], 0, 2, ([True, True], [40, 41]))
    assert s.tolist() == [40, 41] and d.tolist() == [5, 6]
    with pytest.raises(ValueError):
        plan.resolve_indices([10, 11, 12], [5, 6], 0, 2, ([True, True, True], [40, 41, 42]))
    with pytest.raises(ValueError):
        plan.resolve_indices([10, 11, 12], [5, 6], 0, 2, ([True, True], [40, 41, 42]))


@pytest.mark.parametrize("seed", range(200))
def test_resolve_never_returns_lists_of_different_lengths(seed):
    rng = np.random.default_rng(10_000 + seed)
    n_req = int(rng.integers(1, 20))
    dst = random_pages(rng, n_req, 100, 400)
    src = random_pages(rng, int(rng.integers(0, n_req + 3)))
    mode = ["OFF/OFF", "ON/OFF", "OFF/ON", "ON/ON"][seed % 4]
    src_l15 = random_src_l15(rng, len(src)) if mode.startswith("ON") else None
    dst_l15 = random_dst_l15(rng, n_req) if mode.endswith("/ON") else None
    try:
        s, d = plan.resolve_indices(src, dst, 0, n_req, src_l15, dst_l15)
    except ValueError:
        return
    assert len(s) == len(d)


def test_resolve_off_on_uses_decode_local_pages():
    mask = np.array([True, False, True, True])
    mapping = np.cumsum(mask) - 1
    s, d = plan.resolve_indices([1, 2, 3], [0, 0, 0, 0], 1, 4, None, (mask, mapping, [70, 71, 72]))
    assert s.tolist() == [2, 3] and d.tolist() == [71, 72]


def test_resolve_on_on_intersection():
    dmask = np.array([True, True, False, True])
    s, d = plan.resolve_indices([1, 2, 3, 4], [0, 0, 0, 0], 0, 4, ([True, False, True, True], [50, 52, 53]),
                                (dmask, np.cumsum(dmask) - 1, [60, 61, 63]))
    assert s.tolist() == [50, 53] and d.tolist() == [60, 63]


@pytest.mark.parametrize("src_l15,dst_l15", [
    ((None, [1]), None), (([True], None), None),
    (None, (None, [0], [1])), (None, ([True], None, [1])), (None, ([True], [0], None)),
    (([True], [1]), (None, [0], [1])), (([True, True], [1, 2]), None),
    ("xy", None), (([True],), None), (None, ([True], [0])),
])
def test_resolve_rejects_missing_or_bad_metadata(src_l15, dst_l15):
    with pytest.raises(ValueError):
        plan.resolve_indices([1], [2], 0, 1, src_l15, dst_l15)


def test_resolve_rejects_out_of_range_local_index():
    with pytest.raises(ValueError):
        plan.resolve_indices([1], [2], 0, 1, None, ([True], [5], [1]))


def test_resolve_python_slice_rules():
    call_both(([1, 2, 3], [9, 8, 7, 6], -3, None, None, None))
    call_both(([1, 2, 3], [9, 8, 7, 6], None, -1, None, None))
    call_both(([1, 2, 3], [9, 8, 7, 6], 3, 1, None, None))


# ---- layer_groups ---------------------------------------------------------------------------

@pytest.mark.parametrize("layer_num", [0, 1, 2, 5, 32, 61])
@pytest.mark.parametrize("interval", [-3, 0, 1, 2, 3, 7, 100])
@pytest.mark.parametrize("begin", [0, 12345, -5])
def test_layer_groups_matches_reference(layer_num, interval, begin):
    got = plan.layer_groups(layer_num, interval, begin)
    want = ref.layer_groups(layer_num, interval, begin)
    assert got.dtype == np.int64 and got.shape == (len(want), 3)
    assert [tuple(r) for r in got.tolist()] == want


def test_layer_groups_rejects_negative_count():
    with pytest.raises(ValueError):
        plan.layer_groups(-1, 1, 0)
