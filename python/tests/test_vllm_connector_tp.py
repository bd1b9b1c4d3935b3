"""PdkvConnector across real processes: TP 1->2 and 2->1, NHD and HND caches, chunked
prefill with per-layer save (layerwise streaming) and a decode-side prefix hit. Every
byte that lands on every decode rank is checked."""
import pytest

torch = pytest.importorskip("torch")  # imported once here; the forked ranks inherit it
from vllm_cluster import assert_delivered, run_prefill_then_decode

REQUESTS = [("req-a", 22, 1, None), ("req-b", 9, 2, None)]


def test_tp1_to_tp2_nhd_chunked_layerwise_with_decode_prefix():
    done, params = run_prefill_then_decode(
        1, 2, "NHD", 4, REQUESTS, chunk=8, extra_p={"layerwise": True},
        prefix_blocks={"req-a": 2})
    assert_delivered(done, REQUESTS, 1, 2)
    assert params["req-a"]["pdkv_num_blocks"] == 6 and params["req-b"]["pdkv_num_blocks"] == 3
    assert params["req-a"]["pdkv_room"] != params["req-b"]["pdkv_room"]


def test_tp2_to_tp1_hnd_chunked_whole_prompt_push():
    done, _ = run_prefill_then_decode(2, 1, "HND", 4, REQUESTS, chunk=6)
    assert_delivered(done, REQUESTS, 2, 1)
