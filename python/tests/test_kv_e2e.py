"""The engine-facing API across real processes: bootstrap server, ZeroMQ control plane,
TCP engine. Every scenario checks the destination bytes of every room on every rank."""
import time

import numpy as np
import pytest

import pdkv
from kv_harness import Cluster, Shape

SUCCESS, FAILED = int(pdkv.KVPoll.Success), int(pdkv.KVPoll.Failed)


def assert_all_succeeded(done):
    for (role, rank), report in done.items():
        for room, state in report["states"].items():
            assert state == SUCCESS, f"{role} {rank} room {room}: {report['reasons'].get(room)}"
        if role == "decode":
            assert all(report["bytes_ok"].values()), f"decode {rank}: wrong bytes"
        assert report["active"] == 0, f"{role} {rank} still holds {report['active']} rooms"


@pytest.mark.parametrize("p_tp,d_tp,mla,heads", [
    (1, 1, False, 4), (1, 2, False, 4), (2, 1, False, 4), (2, 4, False, 4),
    (4, 2, False, 8), (2, 4, True, 1), (1, 4, False, 2),
])
def test_heterogeneous_tp(p_tp, d_tp, mla, heads):
    shape = Shape(mla=mla, heads=heads)
    with Cluster(pdkv, shape, p_tp=p_tp, d_tp=d_tp, rooms=(11, 12, 13), pages=6) as c:
        assert_all_succeeded(c.start().run())


def test_dp_attention_on_both_sides_routes_each_room_to_its_group():
    with Cluster(pdkv, Shape(), p_tp=1, p_dp=2, d_tp=1, d_dp=2, rooms=(20, 21, 22, 23)) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        # room % dp picks the prefill group: each prefill rank served only its rooms.
        assert set(done[("prefill", 0)]["states"]) == {20, 22}
        assert set(done[("prefill", 1)]["states"]) == {21, 23}


def test_chunked_prefill_and_first_token_reach_the_decode():
    with Cluster(pdkv, Shape(), rooms=(30, 31), pages=12, chunks=3, token=1000) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        meta = done[("decode", 0)]["meta"]
        assert meta[30] == (1030, [30, 7])
        assert meta[31] == (1031, [31, 7])


def test_first_token_reaches_every_decode_rank_with_heterogeneous_tp():
    with Cluster(pdkv, Shape(), p_tp=2, d_tp=4, rooms=(40,), token=5) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        for d in range(4):
            assert done[("decode", d)]["meta"][40] == (45, [40, 7])


def test_layerwise_waits_for_the_forward_then_delivers():
    # No forward pass marks layers here, so a layerwise prefill must not report Success;
    # its waiting timeout fails the room on both sides instead of hanging.
    env = {"PDKV_WAITING_TIMEOUT_S": "1.0"}
    with Cluster(pdkv, Shape(), rooms=(50,), layerwise_interval=1, env=env, timeout=10) as c:
        done = c.start().run(timeout=30)
        assert done[("prefill", 0)]["states"][50] == FAILED
        assert done[("decode", 0)]["states"][50] == FAILED
        assert "timeout" in done[("prefill", 0)]["reasons"][50]


def test_decode_whose_prefill_never_registers_fails_after_the_bootstrap_timeout():
    env = {"PDKV_BOOTSTRAP_TIMEOUT_S": "1.0"}
    with Cluster(pdkv, Shape(), p_tp=0, rooms=(60,), env=env, timeout=10) as c:
        start = time.monotonic()
        done = c.start().run(timeout=20)
        elapsed = time.monotonic() - start
        report = done[("decode", 0)]
        assert report["states"][60] == FAILED
        assert "bootstrap timeout" in report["reasons"][60]
        assert report["active"] == 0
        assert elapsed < 10


def test_kill_9_of_a_decode_fails_its_rooms_on_the_prefill_and_spares_the_others():
    with Cluster(pdkv, Shape(), p_tp=1, d_tp=1, d_dp=2, rooms=(70, 71), timeout=15) as c:
        c.start()
        # Decode rank 1 (DP group 1) pre-allocates room 71, then dies before any byte moves.
        time.sleep(1.0)
        killed = time.monotonic()
        c.kill("decode", 1)
        done = c.run(timeout=30, expect=[("prefill", 0), ("decode", 0)])
        prefill = done[("prefill", 0)]
        assert prefill["states"][71] == FAILED
        assert prefill["states"][70] == SUCCESS
        assert done[("decode", 0)]["bytes_ok"][70]
        assert time.monotonic() - killed < 15
        assert prefill["active"] == 0


def test_kill_9_of_a_prefill_fails_the_decode_rooms_within_the_heartbeat_bound():
    with Cluster(pdkv, Shape(), rooms=(80,), timeout=20) as c:
        c.start()
        time.sleep(1.0)  # the decode registered and pre-allocated; the prefill waits for go
        killed = time.monotonic()
        c.kill("prefill", 0)
        done = c.run(timeout=30, expect=[("decode", 0)])
        detect = time.monotonic() - killed
        report = done[("decode", 0)]
        assert report["states"][80] == FAILED
        # Found by its connection closing (at once) or, failing that, by silence.
        assert ("stopped answering" in report["reasons"][80] or
                "is gone" in report["reasons"][80]), report["reasons"][80]
        # heartbeat 0.2 s x 3 failures + 1 s (R2), plus the polling slack of this harness.
        assert detect < 0.6 + 1.0 + 1.0
