"""State groups and strided KV pages through the engine-facing API: a hybrid model's room
(mamba-like state slots in group 0, sliding-window KV layers on group 1's pages, chunked
KV layers) moved between real processes, every destination byte checked; and the
ValueErrors a rank gets for a wrong number of state lists or bad group vectors."""
import time

import numpy as np
import pytest

import pdkv
from pdkv.testing.bootstrap import LoopbackBootstrap
from pdkv.testing.processes import SPAWN, join_or_kill
from pdkv.testing.reports import drain_reports
from state_groups_harness import HybridRank, decode_main, prefill_main

SUCCESS = int(pdkv.KVPoll.Success)


def run_room(d_tp: int, strided: bool, room: int) -> dict:
    server = LoopbackBootstrap(pdkv)
    results = SPAWN.Queue()
    stop = SPAWN.Value("i", 0, lock=False)
    base = dict(addr=server.addr, room=room, strided=strided, seed=room)
    procs = [SPAWN.Process(target=prefill_main, args=(base, results, stop))]
    procs += [SPAWN.Process(target=decode_main, args=(dict(base, tp=d_tp, rank=r), results, stop))
              for r in range(d_tp)]
    done, errors = {}, []

    def take(msg):
        kind, role, rank, payload = msg
        if kind == "done":
            done[(role, rank)] = payload
        elif kind == "error":
            errors.append(f"{role} {rank}:\n{payload}")

    try:
        for p in procs:
            p.start()
        drain_reports(results, lambda: len(done) == len(procs) or errors,
                      time.monotonic() + 90, take)
    finally:
        stop.value = 1
        join_or_kill(procs, time.monotonic() + 15)
        server.stop()
    assert not errors, "\n".join(errors)
    assert len(done) == len(procs), f"only {sorted(done)} reported"
    return done


@pytest.mark.parametrize("d_tp,strided", [(1, False), (2, False), (1, True), (2, True)])
def test_hybrid_room_moves_every_group_across_processes(d_tp, strided):
    done = run_room(d_tp, strided, room=70 + d_tp + 10 * strided)
    for (role, rank), report in done.items():
        assert report["state"] == SUCCESS, f"{role} {rank}: {report['reason']}"
        if role == "decode":
            assert report["bytes_ok"], f"decode {rank}: wrong bytes"


def test_bad_group_vectors_are_value_errors():
    rank = HybridRank(1, 0, False, 0)
    with pytest.raises(ValueError, match="state_buffer_groups has 1 entries"):
        pdkv.KVManager(rank.kv_args(pdkv, state_buffer_groups=[0]), "decode", "127.0.0.1:1")
    with pytest.raises(ValueError, match="kv_layer_groups holds -2"):
        pdkv.KVManager(rank.kv_args(pdkv, kv_layer_groups=[-1, -1, -2, 1]), "decode",
                       "127.0.0.1:1")
    with pytest.raises(ValueError, match="kv_layer_groups has 3 entries"):
        pdkv.KVManager(rank.kv_args(pdkv, kv_layer_groups=[-1, -1, 1]), "decode", "127.0.0.1:1")
    with pytest.raises(ValueError, match="kv_page_strides"):
        pdkv.KVManager(rank.kv_args(pdkv, kv_page_strides=[1] * 8), "decode", "127.0.0.1:1")


def test_wrong_number_of_state_lists_is_a_value_error():
    server = LoopbackBootstrap(pdkv)
    rank = HybridRank(1, 0, False, 0)
    try:
        prefill = pdkv.KVManager(rank.kv_args(pdkv), "prefill", server.addr)
        sender = pdkv.KVSender(prefill, server.addr, 91)
        sender.init(1)
        with pytest.raises(ValueError, match="3 lists but this rank has 2 state groups"):
            sender.send([0], state_indices=[[1], [2], [3]])
        with pytest.raises(ValueError, match="one list but this rank has 2 state groups"):
            sender.send([0], state_indices=[1])
        with pytest.raises(ValueError, match="mixes lists and integers"):
            sender.send([0], state_indices=[[1], 2])
        decode_rank = HybridRank(1, 0, False, 0)
        decode = pdkv.KVManager(decode_rank.kv_args(pdkv), "decode", server.addr)
        receiver = pdkv.KVReceiver(decode, server.addr, 91)
        receiver.init()
        with pytest.raises(ValueError, match="1 lists but this rank has 2 state groups"):
            receiver.send_metadata([0], state_indices=[np.array([1])])
        sender.abort()
        receiver.abort()
        prefill.shutdown()
        decode.shutdown()
    finally:
        server.stop()
