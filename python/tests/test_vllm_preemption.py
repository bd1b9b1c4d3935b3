"""A prefill request preempted by vLLM (its blocks freed and rewritten by others, the
request started over from the waiting queue, update_state_after_alloc called again with
new blocks) must still hand the decode the right KV: never a failed load, never a byte
read from the freed blocks. Real prefill and decode rank processes around a real
bootstrap server; the freed blocks are poisoned as the next request to hold them would
write them."""
import pytest

from engine_replay import use_standins

use_standins()
torch = pytest.importorskip("torch")

from vllm_cluster import assert_delivered, run_prefill_then_decode  # noqa: E402

# 19 tokens in 8-token chunks: the preemption comes after the first chunk (two full
# pages computed; with layerwise they already went to pdkv)
REQUESTS = [("pre", 19, 5, 3131), ("calm", 12, 6, None)]


@pytest.mark.parametrize("layerwise,fill_preempted", [
    (False, True),   # whole-prompt push: nothing handed over yet, the room lives on
    (True, True),    # pages already with pdkv: their room fails, a fresh one takes over
    (True, False),   # a vLLM that leaves preempted_req_ids unset: the resume tells
])
def test_preempted_prefill_request_still_delivers_its_kv(layerwise, fill_preempted):
    done, params = run_prefill_then_decode(
        1, 1, "NHD", 2, REQUESTS, chunk=8, extra_p={"layerwise": layerwise},
        prefill=dict(preempt={"pre": 1}, fill_preempted_req_ids=fill_preempted))
    assert_delivered(done, REQUESTS, 1, 1)
    assert done["p0"]["unfreed"] == []
    if layerwise:
        # the decode is told the room that carried the bytes, not the one that failed
        assert params["pre"]["pdkv_room"] != 3131
    else:
        assert params["pre"]["pdkv_room"] == 3131


def test_preempted_request_on_tp2_prefill_to_tp1_decode():
    requests = [("pre", 19, 7, None)]
    done, _ = run_prefill_then_decode(2, 1, "HND", 4, requests, chunk=8,
                                      extra_p={"layerwise": True},
                                      prefill=dict(preempt={"pre": 1}))
    assert_delivered(done, requests, 2, 1)
