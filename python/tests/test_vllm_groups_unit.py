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


def _mamba(spec_blocks=0, mode="none"):
    from vllm.v1.kv_cache_interface import MambaSpec
    return MambaSpec(block_size=4, shapes=((2,),), dtypes=(torch.float16,),
                     num_speculative_blocks=spec_blocks, mamba_cache_mode=mode)


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


def test_mamba_state_is_not_loaded_across_tp_sizes():
    from pdkv.integrations.vllm.scheduler import SchedulerSide
    from vllm.v1.request import Request
    layout = GroupLayout.from_kv_cache_config(_config(_full(), _mamba()), 4)
    decode = SchedulerSide(4, "p:1", "d", False, False, True, groups=layout, tp_size=2)
    params = {"do_remote_prefill": True, "pdkv_room": 3, "pdkv_bootstrap_addr": "p:1",
              "pdkv_num_tokens": 8, "pdkv_tp_size": 1}
    assert decode.get_num_new_matched_tokens(Request("r", list(range(9)), params), 0) == (0, False)
    params["pdkv_tp_size"] = 2
    assert decode.get_num_new_matched_tokens(Request("r", list(range(9)), params), 0) == (8, True)


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
