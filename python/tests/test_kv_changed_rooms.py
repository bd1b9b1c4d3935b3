"""KVManager.changed_rooms() and the adapters' RoomStates over it: a scheduler that polls
only the rooms the manager says changed sees every room end, on both sides, with the
bytes in place. Real managers, one process, loopback (ZeroMQ control plane, TCP engine)."""
import time

import numpy as np

import pdkv
from pdkv.integrations.room_states import RoomStates
from test_kv_misuse import fast_env, one_to_one, server  # noqa: F401 (fixtures)

TERMINAL = (pdkv.KVPoll.Success, pdkv.KVPoll.Failed)


def drain_changes(mgr, objs, timeout_s=20.0):
    """Polls, like an engine's step, only the rooms changed_rooms() names; returns
    {room: final state} and every list it got."""
    ended, lists, deadline = {}, [], time.monotonic() + timeout_s
    while len(ended) < len(objs) and time.monotonic() < deadline:
        changed = mgr.changed_rooms()
        lists.append(changed)
        for room in (objs if changed is None else changed):
            if room in objs and room not in ended and objs[room].poll() in TERMINAL:
                ended[room] = objs[room].poll()
        time.sleep(0.002)
    return ended, lists


def test_changed_rooms_names_every_room_that_ended_on_both_sides(fast_env, server):  # noqa: F811
    with one_to_one(server) as pair:
        # The first call starts the list and says "poll everything".
        assert pair.prefill.changed_rooms() is None
        assert pair.decode.changed_rooms() is None
        assert pair.decode.changed_rooms() == []  # nothing moved since
        rooms = range(30, 38)
        senders, receivers = {}, {}
        for k, room in enumerate(rooms):
            src = np.arange(4 * k, 4 * k + 4, dtype=np.int64)
            dst = np.arange(32 + 4 * k, 36 + 4 * k, dtype=np.int64)
            senders[room], receivers[room] = pair.open_room(room, src, dst)
            senders[room].send(src)
        got_d, lists_d = drain_changes(pair.decode, receivers)
        got_p, lists_p = drain_changes(pair.prefill, senders)
        assert got_d == {r: pdkv.KVPoll.Success for r in rooms}
        assert got_p == {r: pdkv.KVPoll.Success for r in rooms}
        for k, room in enumerate(rooms):
            assert pair.dmem.holds(room, np.arange(32 + 4 * k, 36 + 4 * k, dtype=np.int64))
        for lst in lists_d + lists_p:  # each room at most once per list
            assert lst is not None and len(lst) == len(set(lst))
        # Nothing changes once every room ended.
        assert pair.decode.changed_rooms() == [] and pair.prefill.changed_rooms() == []


def test_room_states_answers_each_poll_and_sees_the_end(fast_env, server):  # noqa: F811
    with one_to_one(server) as pair:
        states = RoomStates(pair.decode, refresh_s=0.0)
        src, dst = np.arange(4, dtype=np.int64), np.arange(20, 24, dtype=np.int64)
        sender, receiver = pair.open_room(9, src, dst)
        first = states.poll(receiver)
        assert first not in TERMINAL  # nothing sent yet: the state is kept
        assert states.poll(receiver) == first
        sender.send(src)
        deadline = time.monotonic() + 20
        while states.poll(receiver) not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.002)
        assert states.poll(receiver) == pdkv.KVPoll.Success
        assert pair.dmem.holds(9, dst)
        # An aborted room is answered Failed at once, not from what was kept.
        s2, r2 = pair.open_room(10, src, np.arange(30, 34, dtype=np.int64))
        assert states.poll(r2) not in TERMINAL
        r2.abort()
        states.forget(r2)
        assert states.poll(r2) == pdkv.KVPoll.Failed


def test_metrics_count_the_cpu_of_each_stage_of_a_transfer(fast_env, server):  # noqa: F811
    with one_to_one(server) as pair:
        before = pair.prefill.metrics()["cpu_seconds"]
        assert set(before) == {"control", "planning", "submission", "completion", "api"}
        src, dst = np.arange(8, dtype=np.int64), np.arange(16, 24, dtype=np.int64)
        sender, receiver = pair.open_room(3, src, dst)
        sender.send(src)
        ended, _ = drain_changes(pair.decode, {3: receiver})
        assert ended == {3: pdkv.KVPoll.Success}
        after = pair.decode.metrics()["cpu_seconds"]  # process-wide: both managers' work
        for stage in ("control", "planning", "submission", "api"):
            assert after[stage] > before[stage], stage
