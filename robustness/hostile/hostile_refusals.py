"""Hostile-peer cases on refused writes. A decode's engine refuses a write that no live
grant of its own covers: that is its policy for one room, not a sign that it is gone. A
refusal must fail the room it was for and nothing else; only a peer's absence may open
the prefill's circuit breaker on the decode's engine endpoint, which would fail every
other room bound there. Two ways to make a prefill's write to a decode be refused:

  - no attacker: the decode cancels a request while its KV is in flight (it revokes the
    room's grant, so the rest of the room's batches are refused);
  - a stranger registers as a decode of its own (its own control endpoint) but names the
    victim decode's engine endpoint, then pre-allocates a room whose id it knows: the
    prefill pushes that room's KV to the victim's engine, which refuses it.

Registered into hostile.ATTACKS (hostile.py imports this module)."""
import time

from pdkv.testing import FAILED, SUCCESS, wait_until
from pdkv.testing.fault_shim import on_ack_frames

from hostile import Run, attack, prefill_only_room
from hostile_cluster import describe

ROUNDS = 12  # the old breaker failed the other rooms in about half the rounds

# 32 KiB batches, about five in flight at a time, on one stream: a room of the victims'
# 8 pages (4 buffers of 8 KiB a page) is 8 batches, so when the decode aborts a room
# several of its batches are on their way, and the next room waits on the link behind
# them. The decode's every ACK frame is stalled 10 ms (the fault shim), so a room takes
# several round trips and the abort lands mid-transfer.
MID_TRANSFER_ENV = {"PDKV_TRANSFER_BATCH_BYTES": str(32 << 10),
                    "PDKV_TRANSFER_WINDOW_BYTES": str(160 << 10), "PDKV_TCP_STREAMS": "1"}


def _judge_round(r: Run, aborted, others):
    """What went wrong with one round: the aborted room not failed on either side, or one
    of the others not a Success with its bytes verified. Counts the verified bytes."""
    out = []
    for rk in (r.c.p, r.c.d):
        st = rk.states()
        if st.get(aborted, {}).get("state") != FAILED:
            out.append(f"aborted room {aborted} did not fail: {describe(r.c, [aborted])}")
        for room in others:
            ev = st.get(room, {})
            if ev.get("state") != SUCCESS or (rk is r.c.d and not ev.get("bytes_ok")):
                out.append(describe(r.c, [room]))
            elif rk is r.c.d:
                r.out.bytes_verified += ev.get("bytes", 0)
    return out


@attack("abort_mid_transfer", f"no attacker: in each of {ROUNDS} rounds the decode aborts one of "
        "three rooms as its first bytes land; the other two (queued behind it, sent after "
        "it ended) must succeed", always_fresh=True, env=MID_TRANSFER_ENV,
        decode_env=lambda: on_ack_frames(mode="stall", stall_ms=10))
def _abort_mid_transfer(r: Run):
    c = r.c
    wrong = []
    for k in range(ROUNDS):
        rooms = list(c.open_rooms(3, send=False, abort_on_bytes=[0]))
        aborted, queued, later = rooms
        if not c.wait_bootstrapped(rooms):
            wrong.append(f"round {k}: not bootstrapped: {describe(c, rooms)}")
            break
        c.p.send(op="send", rooms=[aborted, queued])
        wait_until(lambda: c.p.states().get(aborted, {}).get("state") in (FAILED, SUCCESS),
                   10, 0.002)
        time.sleep(0.1)  # the aborted room's batches still in flight come back refused
        c.p.send(op="send", rooms=[later])
        c.wait_rooms([c.p, c.d], rooms, 15)
        wrong += [f"round {k}: {w}" for w in _judge_round(r, aborted, (queued, later))]
    r.expect(f"in each of {ROUNDS} rounds the aborted room failed alone", not wrong,
             f"{len(wrong)} wrong: " + " | ".join(wrong[:3]))
    r.expect("the decode's engine refused writes of an aborted room (the race was hit)",
             any("part rejected" in line for line in c.d.err), "no refusal in its log")


@attack("registration_naming_victim_engine", "register as a decode of its own that names the "
        "victim decode's engine endpoint, pre-allocate a room the prefill is sending: the "
        "refused push fails that room only, the victim's rooms sent right after succeed",
        fresh=True)
def _registration_naming_victim_engine(r: Run):
    started = []

    def hit(rooms):
        room = prefill_only_room(r)
        # The stranger stays up meanwhile: gone, it would fail its room by its absence.
        started.append(r.start_peer(
            "whole-pool", "--honest", "--control", r.c.p.ready["ctrl"], "--as-engine",
            r.c.d.ready["eng"], "--room", room, "--count", r.c.pages, "--pages",
            r.c.p.ready["pages"], "--hold-ms", 1000))
        if r.secret:
            return
        ended = wait_until(lambda: r.c.p.states().get(room, {}).get("state") in (FAILED, SUCCESS),
                           10, 0.002)
        ev = r.c.p.states().get(room, {})
        r.expect("the stranger's room failed, refused by the victim's engine",
                 ended and ev.get("state") == FAILED and "OutOfRange" in ev.get("reason", ""),
                 ev)
    # The victim's rooms are sent 50 ms after the refusal, inside the cooldown (a second)
    # of a breaker the refusal would have opened.
    r.during(hit, n=3, settle=0.05)
    if not started:
        return  # the rooms never bootstrapped (during() said so)
    seen = r.peer_result(started[0])
    if r.secret:
        r.refused_at_door(seen, "registration_naming_victim_engine")
    else:
        r.expect("the stranger's registration was accepted",
                 seen.get("registration", {}).get("accepted"), seen)
