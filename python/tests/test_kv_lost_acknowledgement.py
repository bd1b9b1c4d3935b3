"""A room's last batch lands on the decode, Success status and all, and then its
acknowledgement is lost with the connection. The prefill retries the batch on a new
connection; the decode, whose room already succeeded (its write grant closed), answers
AlreadyCompleted, and the prefill ends Success too. Before, the retry was refused as a
write outside the grant and the two sides disagreed: decode Success, prefill Failed.

Real processes over loopback (kv_harness.Cluster). The decode runs with the chaos fault
shim (LD_PRELOAD) set to break its engine connection on the first ACK frame it sends, so
the loss happens at exactly that point of the protocol, every run.
"""
import re

import pdkv
from kv_harness import Cluster, Shape
from pdkv.testing.fault_shim import on_ack_frames

SUCCESS = int(pdkv.KVPoll.Success)


def break_first_ack():
    return on_ack_frames(max=1)


def check_one_ack_broken(err: str):
    """The fault did happen (the shim reports at exit): otherwise these tests prove nothing.
    And the decode refused the retry as already completed at least once."""
    assert re.search(r"pdkv_fault_shim: injected 1 of \d+ matching calls", err), err[-2000:]
    return err


def check_all_succeeded(done, rooms, d_ranks=1, p_ranks=1):
    for r in range(p_ranks):
        prefill = done[("prefill", r)]
        assert prefill["states"] == {room: SUCCESS for room in rooms}, prefill["reasons"]
    for r in range(d_ranks):
        decode = done[("decode", r)]
        assert decode["states"] == {room: SUCCESS for room in rooms}, decode["reasons"]
        assert all(decode["bytes_ok"].values()), decode["bytes_ok"]


def test_one_room_whose_last_ack_is_lost_succeeds_on_both_sides(capfd):
    rooms = (11,)
    with Cluster(pdkv, Shape(), rooms=rooms, spawn_env={"decode": break_first_ack()},
                 timeout=20) as c:
        done = c.start().run(timeout=40)
    check_all_succeeded(done, rooms)
    assert "whose room already succeeded" in check_one_ack_broken(capfd.readouterr().err)


def test_rooms_sharing_the_batch_whose_ack_is_lost_all_succeed(capfd):
    # Several small rooms to one decode rank travel in one batch: the retry is refused as
    # a whole (the first room's grant is closed), split per room, and each part is then
    # answered AlreadyCompleted on its own.
    rooms = tuple(range(20, 28))
    with Cluster(pdkv, Shape(), rooms=rooms, pages=2, spawn_env={"decode": break_first_ack()},
                 timeout=20) as c:
        done = c.start().run(timeout=40)
    check_all_succeeded(done, rooms)
    check_one_ack_broken(capfd.readouterr().err)


def test_heterogeneous_tp_with_a_lost_ack_succeeds_on_every_rank(capfd):
    # Prefill TP 2 -> decode TP 1: the decode room needs both prefill ranks' statuses, so
    # the first rank's retry may come while the room still waits for the second (the
    # grant is open: the same bytes land again) or after it succeeded (AlreadyCompleted).
    rooms = (31, 32)
    with Cluster(pdkv, Shape(), rooms=rooms, p_tp=2, spawn_env={"decode": break_first_ack()},
                 timeout=20) as c:
        done = c.start().run(timeout=40)
    check_all_succeeded(done, rooms, p_ranks=2)
    check_one_ack_broken(capfd.readouterr().err)
