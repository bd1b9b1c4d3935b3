"""Hybrid-model state through pdkv's sglang adapter: sglang's state components (Mamba slots,
SWA pages, DSA indexer pages) mapped onto pdkv's state groups, what is refused and why,
and real prefill and decode processes moving KV plus state across TP sizes, every byte
checked."""
import numpy as np
import pytest

import pdkv
from engine_replay import Ranks, use_standins

use_standins()
from sglang.srt.disaggregation.base.conn import KVArgs, StateType  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

from pdkv.integrations.sglang.kvargs import kv_args_and_state  # noqa: E402
from pdkv.integrations.sglang.state_layout import (check_tp_with_prefill,  # noqa: E402
                                                   state_layout)

SUCCESS = int(pdkv.KVPoll.Success)


def _args(comps, page=4, item=64, **extra):
    a = KVArgs()
    a.state_types = [c[0] for c in comps]
    a.state_data_ptrs = [c[1] for c in comps]
    a.state_data_lens = [[1024] * len(c[1]) for c in comps]
    a.state_item_lens = [c[2] for c in comps]
    a.state_conv_shard_groups = [c[3] if len(c) > 3 else [] for c in comps]
    a.page_size = page
    for k, v in extra.items():
        setattr(a, k, v)
    return a


def test_components_become_groups_in_order():
    a = _args([(StateType.MAMBA, [11, 12], [24, 48]), (StateType.SWA, [21, 22], [64, 64]),
               (StateType.DSA, [], [])])
    s = state_layout(a, is_mla=False, page_size=4, kv_item_len=64)
    assert s.group_of_component == [0, 1, None]  # a component without buffers has none
    assert (s.state_data_ptrs, s.state_item_lens, s.state_buffer_groups) == \
        ([11, 12], [24, 48], [0, 0])
    # SWA's K then V buffers are one extra KV layer of group 1 (head-sliced like KV pages)
    assert s.kv_data_ptrs == [21, 22] and s.layer_buffers == [[0, 1]] and s.layer_groups == [1]
    assert s.group_indices([[3], [7, 8], None]) == [[3], [7, 8]]
    assert s.group_indices([None, [7], [1, 2]]) == [[], [7]]
    assert s.group_indices(None) is None and s.group_indices([None, None, None]) is None
    with pytest.raises(ValueError, match="3 state types"):
        s.group_indices([[3], [7]])


def test_dsa_indexer_is_a_group_of_whole_page_slots():
    a = _args([(StateType.DSA, [31, 32], [4 * 132, 4 * 132])])
    s = state_layout(a, is_mla=True, page_size=4, kv_item_len=4 * 576)
    assert s.state_buffer_groups == [0, 0] and not s.layer_buffers
    assert not s.needs_groups  # one group of buffers: the core's plain state, one list
    assert s.group_indices([[5, 6, 7]]) == [5, 6, 7]


@pytest.mark.parametrize("kind,why", [(StateType.SWA_RING, "DeepSeek-V4"),
                                      (StateType.C128_STATE, "DeepSeek-V4"),
                                      (StateType.MINIMAX_INDEX_K, "MiniMax"),
                                      ("dspark_hidden", "state type 'dspark_hidden'")])
def test_refused_state_types_say_why(kind, why):
    with pytest.raises(ValueError, match=why):
        state_layout(_args([(kind, [1], [8])]), False, 4, 64)


def test_swa_pages_of_another_size_are_refused():
    with pytest.raises(ValueError, match="share one page size"):
        state_layout(_args([(StateType.SWA, [1, 2], [64, 64])], swa_page_size=8), False, 4, 64)
    with pytest.raises(ValueError, match="share one page size"):
        state_layout(_args([(StateType.SWA, [1, 2], [32, 32])]), False, 4, 64)


def test_untyped_state_pointers_are_refused_and_no_state_passes():
    a = KVArgs()
    a.state_data_ptrs = [5]
    with pytest.raises(ValueError, match="no state_types"):
        state_layout(a, False, 4, 64)
    a.state_data_ptrs = [[]]
    s = state_layout(a, False, 4, 64)
    assert s.groups == 0 and s.group_indices([]) is None
    with pytest.raises(ValueError, match="registered no state"):
        s.group_indices([[1]])


def test_conv_state_in_several_shards_refuses_another_tp_only():
    a = _args([(StateType.MAMBA, [1, 2], [24, 48], [[8, 8, 8], None])])
    s = state_layout(a, False, 4, 64)
    check_tp_with_prefill(s, 2, 2, "p:1")  # equal TP: slots copy whole
    with pytest.raises(RuntimeError, match="same attention TP"):
        check_tp_with_prefill(s, 1, 2, "p:1")
    one_block = state_layout(_args([(StateType.MAMBA, [1], [24], [[24]])]), False, 4, 64)
    check_tp_with_prefill(one_block, 1, 2, "p:1")  # one contiguous shard: pdkv splits it


def test_parallel_layouts_pdkv_cannot_place_are_refused():
    buf = np.zeros(640, np.uint8)
    a = KVArgs()
    a.engine_rank, a.page_size = 0, 4
    a.kv_data_ptrs, a.kv_data_lens, a.kv_item_lens = [buf.ctypes.data], [640], [64]
    context_parallel = ServerArgs()
    context_parallel.attn_cp_size = 2  # newer sglang's field
    with pytest.raises(ValueError, match="context-parallel"):
        kv_args_and_state(a, context_parallel, True)
    a.dcp_size = 2
    with pytest.raises(ValueError, match="not single tokens"):
        kv_args_and_state(a, ServerArgs(), True)
    a.dcp_size, a.kv_buf_groups = 1, 2
    with pytest.raises(ValueError, match="kv_buf_groups"):
        kv_args_and_state(a, ServerArgs(), True)


def test_state_with_pipeline_stages_is_refused():
    # A stage's state pools hold its own layers; a decode of one stage holds every
    # layer's state in one pool per kind.
    from sglang_state_replay import HybridPool
    pool = HybridPool("mamba", 0, 1)
    with pytest.raises(ValueError, match="hybrid state .* with pipeline parallelism"):
        kv_args_and_state(pool.kv_args(KVArgs, StateType), ServerArgs(pp_size=2), False)


def test_kvargs_carry_groups_for_a_mamba_swa_rank(monkeypatch):
    # The fields handed to pdkv.KVArgs, recorded.
    import types
    monkeypatch.setattr(pdkv, "KVArgs", lambda **fields: types.SimpleNamespace(**fields))
    from sglang_state_replay import HybridPool
    pool = HybridPool("mamba_swa", 1, 2)
    args, state = kv_args_and_state(pool.kv_args(KVArgs, StateType),
                                    ServerArgs(tp_size=2), False, "prefill")
    assert args.kv_layer_groups == [-1, -1, 1]
    assert args.layer_buffers == [[0, 2], [1, 3], [4, 5]]
    assert args.state_buffer_groups == [0, 0]
    assert args.state_item_lens == [12, 24]
    assert args.kv_data_ptrs[4:] == [b.ctypes.data for b in pool.swa]
    assert (args.kv_head_num, args.total_kv_head_num, args.head_dim) == (2, 4, 8)
    assert state.group_indices([[3], [9, 10]]) == [[3], [9, 10]]
    # a model without state hands the core none of the group fields
    plain = KVArgs()
    plain.engine_rank, plain.page_size, plain.kv_head_num, plain.total_kv_head_num = 0, 4, 2, 4
    plain.kv_data_ptrs, plain.kv_data_lens = args.kv_data_ptrs[:4], [b.nbytes for b in pool.kv]
    plain.kv_item_lens, plain.state_data_ptrs = [64] * 4, []
    fields = vars(kv_args_and_state(plain, ServerArgs(tp_size=2), False)[0])
    assert not {"state_buffer_groups", "kv_layer_groups", "state_data_ptrs"} & set(fields)


def _run(family, p_tp, d_tp, **extra):
    from sglang_state_replay import decode_main, prefill_main
    requests = [(501, 13, 1), (502, 7, 2)]
    with Ranks() as ranks:
        for r in range(p_tp):
            ranks.start(f"p{r}", prefill_main, dict(family=family, rank=r, tp=p_tp,
                                                    requests=requests, **extra))
        for r in range(d_tp):
            ranks.start(f"d{r}", decode_main, dict(family=family, rank=r, tp=d_tp,
                                                   requests=requests, **extra))
        ranks.serve_bootstrap()
        ranks.expect("ready", p_tp + d_tp)
        done = {m[1]: m[2]["outcome"] for m in ranks.expect("done", p_tp + d_tp)}
    for name, outcome in done.items():
        for room, got in outcome.items():
            if name.startswith("p"):
                assert got == SUCCESS, (name, room)
            else:
                assert got.pop("state") == SUCCESS, (name, room)
                assert all(got.values()), (name, room, got)


@pytest.mark.parametrize("p_tp,d_tp", [(2, 1), (1, 2), (2, 2)])
def test_mamba_slots_and_swa_window_pages_move_across_tp_sizes(p_tp, d_tp):
    _run("mamba_swa", p_tp, d_tp)


@pytest.mark.parametrize("longer,p_tp,d_tp", [("p", 1, 1), ("d", 1, 1), ("p", 2, 1),
                                               ("d", 1, 2)])
def test_swa_window_lists_of_different_lengths_pair_their_leading_pages(longer, p_tp, d_tp):
    # sglang's prefill may list one window page more than its decode (the page of the
    # token it sampled); the room succeeds with the pages both list, the prefill's extra
    # page (0xEE bytes) reaches no decode page, and a page only the decode lists stays
    # untouched (sglang_state_replay checks each).
    _run("mamba_swa", p_tp, d_tp, longer=longer)


def test_window_groups_are_the_swa_components():
    from sglang_state_replay import HybridPool
    pool = HybridPool("mamba_swa", 0, 1)
    args, state = kv_args_and_state(pool.kv_args(KVArgs, StateType), ServerArgs(tp_size=1),
                                    False, "decode")
    assert state.window_groups == [1] and args.window_state_groups == [1]
    args.window_state_groups = [2]  # a group the rank does not have
    with pytest.raises(ValueError, match="window_state_groups holds 2"):
        pdkv.KVManager(args, "decode", "127.0.0.1:1")


@pytest.mark.parametrize("family,tp", [("mamba", 1), ("mamba", 2), ("dsa", 1), ("dsa", 2)])
def test_one_state_group_moves_at_equal_tp(family, tp):
    # One group of state buffers is the core's plain state: no group fields needed.
    _run(family, tp, tp)


@pytest.mark.parametrize("p_tp,d_tp", [(2, 1), (1, 2)])
def test_mamba_slots_are_split_across_tp_sizes(p_tp, d_tp):
    _run("mamba", p_tp, d_tp)


@pytest.mark.parametrize("p_tp,d_tp", [(2, 1), (1, 2)])
def test_dsa_indexer_pages_are_replicated_like_mla(p_tp, d_tp):
    _run("dsa", p_tp, d_tp)


def test_hybrid_mla_full_layers_are_latent(monkeypatch):
    # A Mamba model whose full-attention layers are MLA: sglang passes is_mla_backend False
    # (it looks at the hybrid pool) and sets is_hybrid_mla_backend.
    import types
    monkeypatch.setattr(pdkv, "KVArgs", lambda **fields: types.SimpleNamespace(**fields))
    bufs = [np.zeros(4 * 64 * 4, np.uint8) for _ in range(3)]
    a = _args([(StateType.MAMBA, [bufs[2].ctypes.data], [24])])
    a.state_data_lens = [[bufs[2].nbytes]]
    a.engine_rank = 0
    a.kv_data_ptrs, a.kv_data_lens = [b.ctypes.data for b in bufs[:2]], [1024, 1024]
    a.kv_item_lens, a.is_hybrid_mla_backend = [64, 64], True
    args = kv_args_and_state(a, ServerArgs(tp_size=2), False)[0]
    assert args.is_mla and args.layer_buffers == [[0], [1]] and args.head_dim == 16
