"""PdkvConnector across real processes: MLA latent caches (TP 1->2); a prefill killed
mid-transfer, which vLLM must see as load-error block ids within the R2 bound; a decode
request aborted mid-load, whose blocks stay held until its room ended and whose prefill
stops and frees its blocks."""
import time

import pytest

torch = pytest.importorskip("torch")  # imported once here; the forked ranks inherit it
from engine_replay import FAILURE_BOUND_S, Ranks
from vllm_cluster import (assert_delivered, request_on_decode, run_prefill_then_decode,
                          start_stalled_prefill_and_decode)


def test_mla_tp1_to_tp2():
    requests = [("mla-a", 13, 5, None), ("mla-b", 16, 6, None)]
    done, _ = run_prefill_then_decode(1, 2, "MLA", 1, requests, chunk=16)
    assert_delivered(done, requests, 1, 2)


def test_killed_prefill_reaches_vllm_as_load_error_blocks():
    room = 4242  # assigned by the proxy, so the decode starts while the prefill computes
    with Ranks() as ranks:
        params = start_stalled_prefill_and_decode(ranks, ("doomed", 20, 3, room),
                                                  dict(report_waiting=True))
        ranks.expect("in_forward")  # layer 0 saved (and streamable), layer 1 never comes
        request_on_decode(ranks, "decode-doomed", 20, 3, params)
        ranks.expect("waiting")
        time.sleep(0.3)  # the decode's pre-allocation reaches the prefill
        killed_at = time.time()
        ranks.kill("p0")
        report = ranks.expect("done", timeout=30)[0][2]
    assert report["finished_recving"] == ["decode-doomed"]
    assert report["load_errors"] == sorted(report["blocks"]["decode-doomed"])
    assert len(report["load_errors"]) == 5
    reason = report["failures"]["decode-doomed"]
    assert "room 4242" in reason, reason
    took = report["recv_time"]["decode-doomed"] - killed_at
    print(f"killed prefill -> vLLM load errors after {took:.3f} s (bound {FAILURE_BOUND_S} s)")
    assert took < FAILURE_BOUND_S, f"failure reached vLLM after {took:.2f} s"


def test_decode_abort_mid_load_holds_blocks_and_stops_the_prefill():
    room = 5151
    with Ranks() as ranks:
        params = start_stalled_prefill_and_decode(ranks, ("gone", 16, 4, room),
                                                  dict(report_waiting=True))
        ranks.expect("in_forward")
        request_on_decode(ranks, "decode-gone", 16, 4, params)
        ranks.expect("waiting")
        time.sleep(0.3)  # the pre-allocation reached the prefill; layer 0 may have landed
        ranks.send("d0", ("abort", "decode-gone"))
        decode = ranks.expect("done", timeout=30)[0][2]
        ranks.send("p0", ("resume",))  # the prefill finishes its forward, then its push
        prefill = ranks.expect("done", timeout=30)[0][2]
    # held until its room ended, then reported once, received (where vLLM frees the
    # blocks of a finished request's load)
    assert decode["held"] == ["decode-gone"] and decode["reports"] == {"decode-gone": ["recving"]}
    assert decode["freed"] == ["decode-gone"] and decode["load_errors"] == []
    assert prefill["finished_sending"] == ["gone"]
    assert "abort" in prefill["failures"]["gone"], prefill["failures"]
