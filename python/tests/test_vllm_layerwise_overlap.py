"""Layerwise streaming under the newer model runner, which calls start_load_kv after the
forward when every load is asynchronous: a layer the forward saved must leave while the
forward is still running, not at wait_for_save. The prefill rank stops inside its
forward after saving layer 0 (a long forward); the decode, already waiting for the room,
must see layer 0's bytes land before the prefill goes on, and every byte at the end."""
import pytest

from engine_replay import Ranks, use_standins

use_standins()
torch = pytest.importorskip("torch")

from vllm_cluster import request_on_decode, start_stalled_prefill_and_decode  # noqa: E402

ROOM = 6161


def test_a_saved_layer_streams_before_the_forward_ends():
    with Ranks() as ranks:
        params = start_stalled_prefill_and_decode(ranks, ("long", 16, 4, ROOM),
                                                  dict(watch_layers=True))
        # a router that knows the room sends the decode its request at once
        request_on_decode(ranks, "decode-long", 16, 4, params)
        ranks.expect("in_forward")
        landed = ranks.expect("landed", timeout=10)[0]
        assert landed[2] == 0, f"layer {landed[2]} landed first"
        ranks.send("p0", ("resume",))
        done = {m[1]: m[2] for m in ranks.expect("done", 2, timeout=30)}
    decode, prefill = done["d0"], done["p0"]
    assert decode["bytes_ok"] == {"decode-long": True} and decode["failures"] == {}
    assert prefill["finished_sending"] == ["long"] and prefill["failures"] == {}
