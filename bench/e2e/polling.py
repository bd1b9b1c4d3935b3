"""How a rank polls its KVSender / KVReceiver objects, like a serving engine's scheduler.

An engine checks its transfers once per scheduler iteration, not in a tight loop; a bench
that polls harder than that steals CPU from the transfer it measures (on 2 cores, 1024
receivers polled every 0.5 ms cost most of a core per decode process). Modes:
- "engine": one pass each ENGINE_TICK_S over the pending objects whose status changed
  since the last pass (KVManager.changed_rooms(); every pending object when it answers
  None or the library has no such call: a pass over 1024 rooms takes ~0.4 ms of `poll()`
  calls). A terminal state is timestamped when a pass sees it, so a room's observed end is
  late by at most one tick plus one pass: the resolution of the scale and soak latencies
  is ~2-3 ms.
- "spin": passes back to back (a whole core per polling process).
- "sleep": a short sleep between passes (sleep_us; the rank lowers its timer slack to
  1 us, so 50 us sleeps ~80 us here instead of ~100 us); it measured lower p50 and p99
  than spinning on 2 cores.
- "wait": KVReceiver.wait() on each room in turn, which wakes when the room ends (no
  timer); with several rooms, one that ended while another was waited on is seen late.
  P5's default (main.py, DECODE_POLL): its warm rooms end one after another in a known
  order (wait_in_order), so waiting on the next one sees each end at once, where "sleep"
  adds up to one ~80 us sleep (and the wake-up of an idle vCPU) to every sample. On
  2026-12-05, 3 alternating pairs of warm runs: p50 1.00-1.24 x the ZeroMQ round trip
  against 1.63-1.79 x with "sleep", p99 2.49-3.32 x against 3.83-6.02 x. (For one room
  per round it did not beat "sleep" on 2026-12-04, before statuses rode the last batch.)"""
from __future__ import annotations

import time

import cpu_cost

ENGINE_TICK_S = 0.002
SUCCESS, FAILED = 4, 0


class Pacer:
    """Sleeps between passes according to the mode (see the module comment)."""

    def __init__(self, mode: str = "engine", sleep_us: float = 50.0):
        if mode not in ("engine", "spin", "sleep", "wait"):
            raise ValueError(f"unknown poll mode {mode!r}")
        self.mode, self.sleep_s = mode, sleep_us / 1e6
        self.next_pass = time.monotonic()

    def wait(self, until: float = float("inf")) -> None:
        """Sleep before the next pass (never past `until`, e.g. the next arrival)."""
        if self.mode in ("spin", "wait"):  # "wait" blocks in wait_all instead
            return
        if self.mode == "sleep":
            time.sleep(self.sleep_s)
            return
        now = time.monotonic()
        self.next_pass += ENGINE_TICK_S
        if self.next_pass < now:  # a slow pass: start over instead of bursting to catch up
            self.next_pass = now + ENGINE_TICK_S
        pause = min(self.next_pass, until) - now
        if pause > 0:
            time.sleep(pause)


def changed(mgr):
    """The rooms of `mgr` to poll now (KVManager.changed_rooms()), or None: poll them all
    (no manager given, the first call, or a library without the call)."""
    take = getattr(mgr, "changed_rooms", None)
    if take is None:
        return None
    t0 = time.thread_time()
    try:
        return take()
    finally:
        cpu_cost.add_poll_cpu(time.thread_time() - t0)


def poll_pass(pending: dict, out: dict, rooms=None) -> None:
    """One pass: moves each terminal object from `pending` to `out[room] = (state, t)`;
    only those of `rooms` when given (the rooms that changed), else every pending one."""
    t0 = time.thread_time()
    for room in (list(pending) if rooms is None else [r for r in rooms if r in pending]):
        st = int(pending[room].poll())
        if st == SUCCESS or st == FAILED:
            out[room] = (st, time.monotonic())
            del pending[room]
    cpu_cost.add_poll_cpu(time.thread_time() - t0)


def any_bootstrapping(objs: dict) -> bool:
    """One pass of the prefill's wait for its pre-allocations (CPU counted as polling)."""
    t0 = time.thread_time()
    try:
        return any(int(o.poll()) == 1 for o in objs.values())  # 1: KVPoll.Bootstrapping
    finally:
        cpu_cost.add_poll_cpu(time.thread_time() - t0)


def wait_all(objs: dict, timeout: float, mode: str = "engine", sleep_us: float = 50.0,
             mgr=None) -> dict:
    """Poll until each object is terminal or `timeout` passes; {room: (state, monotonic time
    it was seen terminal)}; rooms still pending at the timeout keep their last state.
    `mgr` (the objects' KVManager), in "engine" mode: each pass polls only the rooms it
    reports changed (changed())."""
    out, pending = {}, dict(objs)
    deadline = time.monotonic() + timeout
    if mode == "wait":
        for room in list(pending):
            st = int(pending[room].wait(max(0.0, deadline - time.monotonic())))
            if st == SUCCESS or st == FAILED:
                out[room] = (st, time.monotonic())
                del pending[room]
    pacer = Pacer(mode, sleep_us)
    while pending and time.monotonic() < deadline:
        poll_pass(pending, out, changed(mgr) if mode == "engine" else None)
        if pending:
            pacer.wait(deadline)
    for room, o in pending.items():
        out[room] = (int(o.poll()), time.monotonic())
    return out


def wait_in_order(objs: dict, timeout: float, mode: str = "sleep", sleep_us: float = 50.0) -> dict:
    """wait_all for rooms that end one after another in `objs`' order (the prefill sends
    each only after the previous one ended: P5's warm samples, latency.py): each pass polls
    only the first pending room, so a pass costs one poll() however many rooms wait."""
    out, deadline = {}, time.monotonic() + timeout
    pacer = Pacer(mode, sleep_us)
    for room, obj in objs.items():
        if mode == "wait":  # woken when the room ends; poll() below then sees it at once
            obj.wait(max(0.0, deadline - time.monotonic()))
        while True:
            st = int(obj.poll())
            if st == SUCCESS or st == FAILED or time.monotonic() >= deadline:
                out[room] = (st, time.monotonic())
                break
            pacer.wait(deadline)
    return out
