"""pdkv.integrations.vllm.groups: which blocks of each vLLM KV cache group move, on both
sides, and what a prefill of a Mamba model computes (no processes: pure arithmetic)."""
import pytest

from engine_replay import use_standins

use_standins()
torch = pytest.importorskip("torch")

from pdkv.integrations.vllm.groups import GroupKind, GroupLayout, truncate_prompt  # noqa: E402


def _config(*specs):
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
    return KVCacheConfig(8, [], [KVCacheGroupSpec([f"g{i}.l"], s) for i, s in enumerate(specs)])


def _full(bs=4):
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    return FullAttentionSpec(block_size=bs, num_kv_heads=2, head_size=8, dtype=torch.float16)


def _window(bs=4, window=8):
    from vllm.v1.kv_cache_interface import SlidingWindowSpec
    return SlidingWindowSpec(block_size=bs, num_kv_heads=2, head_size=8,
                             dtype=torch.float16, sliding_window=window)


def _mamba(spec_blocks=0, mode="none", mamba_type="mamba2"):
    from vllm.v1.kv_cache_interface import MambaSpec
    return MambaSpec(block_size=4, shapes=((2,),), dtypes=(torch.float16,),
                     num_speculative_blocks=spec_blocks, mamba_cache_mode=mode,
                     mamba_type=mamba_type)


def test_primary_is_the_first_full_group_and_the_rest_are_state_groups():
    layout = GroupLayout.from_kv_cache_config(_config(_window(), _full(), _mamba()), 4)
    assert layout.primary == 1 and layout.hybrid and layout.has_mamba
    assert [(g.index, g.state_group) for g in layout.state_groups] == [(0, 0), (2, 1)]
    assert layout.groups[0].kind == GroupKind.SLIDING and layout.groups[0].window_blocks == 3


def test_sliding_window_keeps_the_window_and_skips_null_and_prefix_blocks():
    layout = GroupLayout.from_kv_cache_config(_config(_full(), _window()), 4)
    # 23 tokens = 6 pages; the window (8 tokens) keeps the last 3 positions
    prefill = layout.state_lists(([1, 2, 3, 4, 5, 6], [0, 0, 0, 9, 10, 11]), 23)
    assert prefill == [[9, 10, 11]]
    decode = layout.state_lists(([1, 2, 3, 4, 5, 6], [7, 8, 12, 13, 14, 15]), 23,
                                skip_tokens=20)
    assert decode == [[-1, -1, 15]]  # positions 3, 4 inside the decode's local prefix


def test_mamba_moves_the_running_state_without_speculative_blocks():
    layout = GroupLayout.from_kv_cache_config(_config(_full(), _mamba(spec_blocks=2)), 4)
    assert layout.state_lists(([1, 2], [0, 30, 31, 32]), 8) == [[30]]
    positional = GroupLayout.from_kv_cache_config(_config(_full(), _mamba(mode="all")), 4)
    assert positional.state_lists(([1, 2], [40, 41]), 8) == [[40, 41]]
    assert layout.remote_token_count(9) == 8 and layout.remote_token_count(1) == 1


def test_a_model_without_a_full_attention_group_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="full-attention"):
        GroupLayout.from_kv_cache_config(_config(_window(), _mamba()), 4)


def test_blocks_per_group_must_match_the_groups():
    layout = GroupLayout.from_kv_cache_config(_config(_full(), _window()), 4)
    with pytest.raises(ValueError, match="per KV cache group"):
        layout.split([1, 2, 3])
    with pytest.raises(ValueError, match="3 KV cache groups"):
        layout.split(([1], [2], [3]))


def test_truncate_prompt_once():
    from vllm.v1.request import Request
    r = Request("r", [5, 6, 7], {"do_remote_decode": True})
    assert truncate_prompt(r) and r.prompt_token_ids == [5, 6] and r.num_prompt_tokens == 2
    assert r._all_token_ids == [5, 6] and r.max_tokens == 1
    assert not truncate_prompt(r) and r.num_prompt_tokens == 2  # a resumed request


@pytest.mark.parametrize("mamba_type,splits", [
    ("mamba2", True), ("mamba1", True), ("gdn_attention", True), ("short_conv", False),
    ("linear_attention", False)])
def test_mamba_state_across_tp_sizes_only_where_it_splits_by_rank(mamba_type, splits):
    from pdkv.integrations.vllm.scheduler import SchedulerSide
    from vllm.v1.request import Request
    layout = GroupLayout.from_kv_cache_config(_config(_full(), _mamba(mamba_type=mamba_type)),
                                              4)
    assert layout.mamba_splits_by_tp is splits
    decode = SchedulerSide(4, "p:1", "d", False, False, True, groups=layout, tp_size=2)
    params = {"do_remote_prefill": True, "pdkv_room": 3, "pdkv_bootstrap_addr": "p:1",
              "pdkv_num_tokens": 8, "pdkv_tp_size": 1}
    want = (8, True) if splits else (0, False)
    assert decode.get_num_new_matched_tokens(Request("r", list(range(9)), params), 0) == want
    params["pdkv_tp_size"] = 2
    assert decode.get_num_new_matched_tokens(Request("r", list(range(9)), params), 0) == (8, True)


def _state_tensors(conv_shape, temporal_shape, page=512, blocks=6):
    raw = torch.zeros(blocks * page, dtype=torch.uint8)
    conv_elems = conv_shape[0] * conv_shape[1]
    conv = torch.as_strided(raw.view(torch.float16), (blocks, *conv_shape),
                            (page // 2, conv_shape[1], 1), 0)
    a, b, c = temporal_shape
    temporal = torch.as_strided(raw.view(torch.float32), (blocks, a, b, c),
                                (page // 4, b * c, c, 1), conv_elems * 2 // 4)
    return raw, [conv, temporal]


def test_mamba2_pieces_in_both_conv_layouts():
    from pdkv.integrations.vllm.mamba_state import state_pieces
    # 2 local heads * head_dim 2 = x of 4 channels, B = C = 3 channels; 3 conv rows
    raw, ds = _state_tensors((10, 3), (2, 2, 4))
    base = raw.data_ptr()
    pieces = state_pieces(ds, "l", "mamba2", dim_first=True)
    assert [(p.ptr - base, p.item, p.stride) for p in pieces] == [
        (0, 4 * 3 * 2, 512), (24, 3 * 3 * 2, 512), (42, 18, 512), (60, 2 * 2 * 4 * 4, 512)]
    assert all(p.length == 5 * 512 + p.item for p in pieces)
    raw, sd = _state_tensors((3, 10), (2, 2, 4))
    base = raw.data_ptr()
    pieces = state_pieces(sd, "l", "mamba2", dim_first=False)
    assert [(p.ptr - base, p.item) for p in pieces] == [
        (0, 8), (8, 6), (14, 6), (20, 8), (28, 6), (34, 6), (40, 8), (48, 6), (54, 6),
        (60, 64)]


def test_gdn_pieces_are_q_k_v_and_other_types_move_whole_pages():
    from pdkv.integrations.vllm.mamba_state import state_pieces
    raw, ds = _state_tensors((12, 3), (2, 4, 2))  # Q = K = 2 channels, V = 2 heads * 4
    base = raw.data_ptr()
    pieces = state_pieces(ds, "l", "gdn_attention", dim_first=True)
    assert [(p.ptr - base, p.item) for p in pieces] == [(0, 12), (12, 12), (24, 48), (72, 64)]
    assert state_pieces(ds, "l", "gdn", dim_first=True) == pieces  # GroupInfo.state_split
    whole = state_pieces(ds, "l", "short_conv", dim_first=True)
    assert [(p.ptr - base, p.item, p.stride) for p in whole] == [(0, 512, 512)]
    with pytest.raises(ValueError, match="is not x"):
        state_pieces(_state_tensors((4, 3), (2, 2, 4))[1], "l", "mamba2", dim_first=True)


def test_a_proposed_room_in_use_gets_a_fresh_one():
    # A client reaching a prefill directly can name any room, also one a live request
    # holds: the scheduler must neither raise (that would end vLLM's engine core) nor
    # take the room from its holder.
    from pdkv.integrations.vllm.scheduler import SchedulerSide
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request
    prefill = SchedulerSide(4, "127.0.0.1:1", "p", False, True, False)
    first = Request("a", list(range(8)), {"do_remote_decode": True, "pdkv_room": 77})
    prefill.update_state_after_alloc(first, KVCacheBlocks(([1, 2],)), 0)
    second = Request("b", list(range(8)), {"do_remote_decode": True, "pdkv_room": 77})
    prefill.update_state_after_alloc(second, KVCacheBlocks(([3, 4],)), 0)
    rooms = {c.req_id: c.room for c in prefill.build_connector_meta(_empty_output()).sends}
    assert rooms["a"] == 77 and rooms["b"] not in (77, None)


def _empty_output():
    from vllm_objects import scheduler_output
    return scheduler_output()
