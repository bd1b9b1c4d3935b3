"""Aux rows, state slots, layerwise streaming, first-token timing, aborts, the end-to-end
checksum and the metrics endpoint, across real processes (bootstrap server, ZeroMQ, TCP
engine). Every success checks the destination bytes, rows and slots."""
import time

import pytest

import pdkv
from kv_harness import Cluster, Shape
from test_kv_e2e import FAILED, SUCCESS, assert_all_succeeded


@pytest.mark.parametrize("p_tp,d_tp", [(1, 1), (2, 2)])
def test_aux_rows_and_state_slots_travel_with_the_last_chunk(p_tp, d_tp):
    with Cluster(pdkv, Shape(), p_tp=p_tp, d_tp=d_tp, rooms=(101, 102), chunks=3, aux=True,
                 state_slots=1) as c:
        assert_all_succeeded(c.start().run())


def test_one_state_slot_is_broadcast_to_every_destination_slot():
    with Cluster(pdkv, Shape(), rooms=(111, 112, 113), aux=True, state_slots=3) as c:
        assert_all_succeeded(c.start().run())


@pytest.mark.parametrize("p_tp,d_tp", [(1, 1), (1, 2), (2, 1)])
def test_layerwise_streams_what_a_simulated_forward_writes(p_tp, d_tp):
    # The prefill's pages are empty until the forward writes each layer, so a layer sent
    # before it was marked ready would land as zeros and fail the byte check.
    with Cluster(pdkv, Shape(layers=4), p_tp=p_tp, d_tp=d_tp, rooms=(121, 122),
                 layerwise_interval=1, forward_ms=30, token=9) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        assert done[("decode", 0)]["meta"][121] == (130, [121, 7])


def test_first_token_published_after_the_kv_still_reaches_the_decode():
    with Cluster(pdkv, Shape(), rooms=(131, 132), token=40, token_after=True,
                 wait_for_metadata=True) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        assert done[("decode", 0)]["meta"][131] == (171, [131, 7])
        assert done[("decode", 0)]["meta"][132] == (172, [132, 7])


def test_first_token_published_before_the_kv():
    with Cluster(pdkv, Shape(), p_tp=2, d_tp=1, rooms=(141,), token=2,
                 wait_for_metadata=True) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        assert done[("decode", 0)]["meta"][141] == (143, [141, 7])


def _assert_failed_everywhere(done, room, prefill_words, decode_words):
    prefill, decode = done[("prefill", 0)], done[("decode", 0)]
    assert prefill["states"][room] == FAILED
    assert decode["states"][room] == FAILED
    for w in prefill_words:
        assert w in prefill["reasons"][room].lower(), prefill["reasons"][room]
    for w in decode_words:
        assert w in decode["reasons"][room].lower(), decode["reasons"][room]
    assert prefill["active"] == 0 and decode["active"] == 0


def test_decode_abort_before_the_transfer_fails_the_room_on_both_sides():
    with Cluster(pdkv, Shape(), rooms=(151,), abort="decode_before_transfer", timeout=15) as c:
        done = c.start().run()
        _assert_failed_everywhere(done, 151, ["abort"], ["abort"])


def test_decode_abort_during_a_layerwise_transfer_stops_the_prefill():
    with Cluster(pdkv, Shape(layers=3), rooms=(161,), layerwise_interval=1, forward_ms=10,
                 abort="decode_mid_forward", timeout=15) as c:
        start = time.monotonic()
        done = c.start().run()
        _assert_failed_everywhere(done, 161, ["abort"], ["abort"])
        # The prefill stopped waiting for layers nobody will mark: no timeout was needed.
        assert time.monotonic() - start < 12


def test_prefill_abort_reaches_the_decode():
    with Cluster(pdkv, Shape(), rooms=(171,), abort="prefill_after_send", layerwise_interval=1,
                 forward_ms=200, timeout=15) as c:
        done = c.start().run()
        _assert_failed_everywhere(done, 171, [], ["abort"])


def test_checksum_on_both_sides_passes_heterogeneous_tp_with_aux_and_state():
    env = {"PDKV_VERIFY_CHECKSUM": "1"}
    with Cluster(pdkv, Shape(), p_tp=1, d_tp=2, rooms=(181, 182), chunks=2, aux=True,
                 state_slots=1, env=env) as c:
        assert_all_succeeded(c.start().run())


def test_metrics_endpoint_serves_each_rank_counters():
    env = {"PDKV_METRICS_PORT": "0"}
    with Cluster(pdkv, Shape(), rooms=(191, 192, 193), env=env) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        prefill, decode = done[("prefill", 0)], done[("decode", 0)]
        assert prefill["metrics"]["rooms_succeeded"] == 3
        assert prefill["metrics"]["bytes_written"] > 0
        assert prefill["metrics"]["stages"]["end_to_end"][0] == 3
        text = prefill["metrics_text"]
        assert 'pdkv_rooms_total{role="prefill",rank="0",outcome="success"} 3' in text, text
        assert 'pdkv_active_rooms{role="prefill",rank="0"} 0' in text
        assert 'pdkv_room_stage_seconds_count{role="prefill",rank="0",stage="wire"} 3' in text
        assert 'pdkv_rooms_total{role="decode",rank="0",outcome="success"} 3' in \
            decode["metrics_text"]
