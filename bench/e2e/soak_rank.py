"""Rank side of the soak (P8): rooms arrive on a schedule and end continuously, as in a
serving engine, over a page allocator.

The driver hands every rank the same schedule (room, tokens, pages, arrival offset) and a
start time t0 on CLOCK_MONOTONIC (system-wide on Linux); each rank follows it by the clock:
- decode: at arrival take pages from the free list, build the KVReceiver and send the
  metadata; at Success check that room's pages against the pattern, poison them and give
  them back; at Failed poison and give back.
- prefill: at arrival take pages, fill them with the pattern (the simulated prefill
  compute), build the KVSender and send (the latency sample starts just before send());
  at Success / Failed give the pages back.
Free pages always hold a constant byte (the pool is pre-faulted with 1s and every page is
poisoned on its way back): an expected page is never constant, so a page the transfer did
not write fails the check, without poisoning on the arrival path (which would add bench
work to the measured latency). A room that finds too few free pages waits in arrival
order (counted in `pool`), as an engine queues a request it cannot place yet.

Numpy work (fill, check, poison) runs in slices of at most SLICE_PAGES pages of one buffer,
interleaved with poll passes every polling.ENGINE_TICK_S, so a 4096-token room does not
stall the observation of other rooms' Success by more than a few ms."""
from __future__ import annotations

import collections
import time

import numpy as np

from pdkv.testing import pattern

import failures
import polling
import sysutil

SLICE_PAGES = 64
WORK_BUDGET_S = 0.002
PROGRESS_EVERY_S = 5.0
POISON = 1  # the constant of free pages (memory.Memory pre-faults with it)


class Job:
    """Numpy work over one room's pages, one (buffer, page slice) per step."""

    def __init__(self, room, pages, kind, then):
        self.room, self.pages, self.kind, self.then = room, pages, kind, then
        self.room_of = np.full(len(pages), room, np.int64)
        self.idx_of = np.arange(len(pages))
        self.buf, self.start, self.ok = 0, 0, True

    def step(self, mem) -> bool:
        """Does one slice; True once every buffer is done."""
        end = min(self.start + SLICE_PAGES, len(self.pages))
        s = slice(self.start, end)
        buf, b = mem.bufs[self.buf], self.buf
        if self.kind == "fill":
            pattern.fill(buf, b, self.pages[s], self.room_of[s], self.idx_of[s], mem.offsets)
        else:  # "check" (then poison) or "poison"
            if self.kind == "check" and self.ok:
                self.ok = pattern.check(buf, b, self.pages[s], self.room_of[s],
                                        self.idx_of[s], mem.offsets)
            buf[self.pages[s]] = POISON
        self.start = end
        if self.start >= len(self.pages):
            self.buf, self.start = self.buf + 1, 0
        return self.buf >= len(mem.bufs)


class SoakLoop:
    def __init__(self, rank, schedule, t0: float, seconds: float, deadline: float):
        from memory import PageAllocator
        assert rank.cfg.get("prefault"), "free pages must start poisoned (Memory prefault)"
        self.rank, self.t0, self.deadline = rank, t0, deadline
        self.pdkv, self.mem, self.cfg = rank.pdkv, rank.mem, rank.cfg
        self.decode = rank.role == "decode"
        self.alloc = PageAllocator(rank.mem.capacity, f"{rank.role}/{rank.rank}")
        self.upcoming = collections.deque(sorted(schedule, key=lambda e: e[3]))
        self.waiting = collections.deque()  # arrived, not yet enough free pages
        self.jobs = collections.deque()
        # room -> KV object in flight (pending), until its end is handled (objs), its pages
        self.pending, self.objs, self.held = {}, {}, {}
        self.arrive, self.send_t, self.end, self.states = {}, {}, {}, {}
        self.reasons, self.bad, self.verified = {}, [], 0
        self.pool_waits, self.max_pool_wait_s = 0, 0.0
        # RSS every 10 s, or 10 samples over a short run (the driver compares the first
        # sample after the first minute / 20 % of the run with the last).
        self.rss, self.rss_every = [], min(10.0, max(1.0, seconds / 10))

    # -- arrivals and admission -------------------------------------------------------
    def _arrivals(self, now):
        while self.upcoming and self.t0 + self.upcoming[0][3] <= now:
            e = self.upcoming.popleft()
            self.arrive[e[0]] = now
            self.waiting.append(e)

    def _admit(self, now):
        while self.waiting:
            room, _, n_pages, _ = self.waiting[0]
            pages = self.alloc.alloc(n_pages)
            if pages is None:
                return  # FIFO: a later small room does not overtake a waiting large one
            self.waiting.popleft()
            wait = now - self.arrive[room]
            if wait > 2 * polling.ENGINE_TICK_S:
                self.pool_waits += 1
                self.max_pool_wait_s = max(self.max_pool_wait_s, wait)
            self.held[room] = pages
            if self.decode:
                self._start_receiver(room, pages)
            else:
                self.jobs.append(Job(room, pages, "fill", self._send))

    def _start_receiver(self, room, pages):
        r = self.pdkv.KVReceiver(self.rank.mgr, self.cfg["addr"], room)
        r.init()
        r.send_metadata(pages)
        self.pending[room] = self.objs[room] = r

    def _send(self, job):
        s = self.pdkv.KVSender(self.rank.mgr, self.cfg["addr"], job.room)
        s.init(len(job.pages))
        self.send_t[job.room] = time.monotonic()  # before send(): see ranks.Rank.go
        s.send(job.pages)
        self.pending[job.room] = self.objs[job.room] = s

    # -- ends ---------------------------------------------------------------------------
    def _ended(self, room, st, t):
        obj = self.objs.pop(room)  # poll_pass already took it out of pending
        self.end[room], self.states[room] = t, st
        if st != polling.SUCCESS:
            self.reasons[room] = (t, failures.room_reason(obj, self.pdkv, "Failed", 0))
        if not self.decode:
            self._release(room)
        else:
            kind = "check" if st == polling.SUCCESS else "poison"
            self.jobs.append(Job(room, self.held[room], kind, self._checked))

    def _checked(self, job):
        if job.kind == "check":
            if job.ok:
                self.verified += 1
            else:
                self.bad.append(job.room)
        self._release(job.room)

    def _release(self, room):
        self.alloc.free(self.held.pop(room))

    # -- the loop -----------------------------------------------------------------------
    def _work(self):
        budget_end = time.monotonic() + WORK_BUDGET_S
        while self.jobs and time.monotonic() < budget_end:
            job = self.jobs[0]
            if job.step(self.mem):
                self.jobs.popleft()
                job.then(job)

    def _housekeeping(self, now, next_rss, next_progress):
        if now >= next_rss:
            self.rss.append((now - self.t0, sysutil.rss_bytes()))
            next_rss += self.rss_every
        if now >= next_progress and self.decode and self.rank.rank == 0:
            ok = sum(1 for s in self.states.values() if s == polling.SUCCESS)
            self.rank.put("progress", {"t": now - self.t0, "succeeded": ok,
                                       "failed": len(self.reasons), "in_flight": len(self.pending),
                                       "pool_used": self.alloc.used})
            next_progress += PROGRESS_EVERY_S
        return next_rss, next_progress

    def run(self) -> dict:
        while time.monotonic() < self.t0:
            time.sleep(min(0.01, max(0.0, self.t0 - time.monotonic())))
        next_poll = next_rss = next_progress = self.t0
        while self.upcoming or self.waiting or self.jobs or self.pending:
            now = time.monotonic()
            if now >= self.deadline:
                break
            self._arrivals(now)
            self._admit(now)
            if now >= next_poll:
                ended = {}
                polling.poll_pass(self.pending, ended)
                for room, (st, t) in ended.items():
                    self._ended(room, st, t)
                next_poll = now + polling.ENGINE_TICK_S  # late: no burst of passes
            next_rss, next_progress = self._housekeeping(now, next_rss, next_progress)
            if self.jobs:
                self._work()
                continue
            wake = min(next_poll, self.deadline,
                       self.t0 + self.upcoming[0][3] if self.upcoming else float("inf"))
            pause = wake - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        self.rss.append((time.monotonic() - self.t0, sysutil.rss_bytes()))
        self._left_over()
        return self._payload()

    def _left_over(self):
        """Rooms the deadline caught: each gets a reason, so failed_rooms counts them."""
        now, waited = time.monotonic(), self.deadline - self.t0
        for room, obj in self.pending.items():
            st = int(obj.poll())
            self.states[room] = st
            name = self.pdkv.KVPoll(st).name
            self.reasons[room] = (now, failures.room_reason(obj, self.pdkv, name, waited))
        for job in self.jobs:
            if job.room not in self.reasons:
                self.reasons[job.room] = (now, f"bench: {job.kind} of its pages unfinished at "
                                               "the deadline")
        for e in self.waiting:
            self.reasons[e[0]] = (now, f"bench: never got {e[2]} free pages of "
                                       f"{self.alloc.capacity} before the deadline")
        for e in self.upcoming:
            self.reasons[e[0]] = (now, "bench: the deadline came before its arrival")

    def _payload(self) -> dict:
        mem = self.mem
        return {
            "states": self.states, "times": self.end, "send_t": self.send_t,
            "reasons": self.reasons, "bad_rooms": self.bad, "verified": self.verified,
            "page_bytes": mem.room_bytes(1), "rss_samples": self.rss,
            "rss": self.rss[-1][1] if self.rss else 0,
            "pool": {"capacity_pages": self.alloc.capacity, "peak_used_pages": self.alloc.peak_used,
                     "page_bytes": mem.room_bytes(1), "waits": self.pool_waits,
                     "max_wait_s": self.max_pool_wait_s}}


def run(rank, schedule, t0, seconds, deadline) -> dict:
    return SoakLoop(rank, schedule, t0, seconds, deadline).run()
