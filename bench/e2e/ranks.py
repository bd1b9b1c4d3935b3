"""Prefill and decode rank processes. The driver sends each rank commands over its own
queue; ranks report (role, rank, kind, payload) on a shared result queue.

Round protocol (latency, scale, layerwise): decode "prepare" (receivers, destination pages
poisoned, metadata sent, then poll until every room ends), prefill "prepare" (senders,
source pages filled, wait for the pre-allocation), prefill "go" (send, or the simulated
layerwise forward; with cfg "sequential", each room is sent once the previous one ended on
the prefill, and the decode polls them in that order). The soak case is one "soak" command
(soak_rank.py). Times are time.monotonic(), which is CLOCK_MONOTONIC and system-wide on
Linux, so they compare across processes. Every room that does not reach Success is
reported with its reason (failure_exception()), so the driver can say why a run failed."""
from __future__ import annotations

import faulthandler
import os
import signal
import time
import traceback

import numpy as np

from pdkv.testing import (DEFAULT_LIVENESS, QUIET, apply_settings, pattern, room_timeouts,
                          shuffled_pages)

import cpu_cost
import failures
import polling
import sysutil
from memory import Memory

# Liveness at pdkv's defaults (R9: a saturated host must not be declared dead at the values
# we ship); room timeouts a 1024-room scale round beside CPU hogs never reaches.
RANK_ENV = dict(QUIET, **DEFAULT_LIVENESS, **room_timeouts(60, 120))
PREALLOC_WAIT_S = 60.0


def round_layout(rooms, pages_per_req, order):
    """Pages of each room (slices of the shuffled order), plus per-page room / index."""
    n = len(rooms) * pages_per_req
    pages = order[:n].astype(np.int64)
    room_of = np.repeat(np.asarray(rooms, np.int64), pages_per_req)
    idx_of = np.tile(np.arange(pages_per_req), len(rooms))
    return pages, room_of, idx_of


def outcomes(objs: dict, states: dict, pdkv, waited_s: float) -> dict:
    """{room: (t, reason)} for every room that did not reach Success."""
    out = {}
    for room, (st, t) in states.items():
        if st != polling.SUCCESS:
            name = pdkv.KVPoll(st).name
            out[room] = (t, failures.room_reason(objs[room], pdkv, name, waited_s))
    return out


def verify_rooms(mem: Memory, layout, ok_rooms) -> list:
    """Rooms among `ok_rooms` (they reached Success) whose destination bytes differ from
    the pattern; vectorised over the round, per room only when something differs."""
    pages, room_of, idx_of = layout
    mask = np.isin(room_of, np.fromiter(ok_rooms, np.int64))

    def good(m):
        return all(pattern.check(buf, b, pages[m], room_of[m], idx_of[m], mem.offsets)
                   for b, buf in enumerate(mem.bufs))

    if not mask.any() or good(mask):
        return []
    return [room for room in sorted(ok_rooms) if not good(room_of == room)]


class Rank:
    """One rank's manager, memory and round state."""

    def __init__(self, cfg, pdkv, results):
        from presets import PRESETS
        self.cfg, self.pdkv, self.results = cfg, pdkv, results
        self.role, self.rank = cfg["role"], cfg["rank"]
        self.preset = PRESETS[cfg["model"]]
        self.ppr = cfg["pages_per_req"]
        self.mem = Memory(self.preset, cfg["page"], cfg["tp"], self.rank, cfg["capacity"],
                          prefault=cfg.get("prefault", False))
        self.mgr = pdkv.KVManager(self.mem.kv_args(self.rank, cfg["tp"]), self.role,
                                  cfg["addr"], backend=cfg["backend"],
                                  layerwise_interval=cfg.get("layerwise_interval", 0))
        self.order = shuffled_pages(cfg["capacity"], f"{self.role}/{self.rank}")
        self.objs, self.layout = {}, None
        self.meter = cpu_cost.CpuMeter(self.mgr)  # P13: a round's room work

    def put(self, kind, payload=None):
        self.results.put((self.role, self.rank, kind, payload))

    def prepare(self, rooms):
        self.layout = round_layout(rooms, self.ppr, self.order)
        if self.role == "decode":
            self._prepare_decode(rooms)
        else:
            self._prepare_prefill(rooms)

    def _prepare_decode(self, rooms):
        pdkv, mem, ppr = self.pdkv, self.mem, self.ppr
        pages, room_of, idx_of = self.layout
        for b, buf in enumerate(mem.bufs):  # poison: expected + 1
            pattern.fill(buf, b, pages, room_of, idx_of, mem.offsets, delta=1)
        self.meter.start()
        self.objs = {}
        for k, room in enumerate(rooms):
            r = pdkv.KVReceiver(self.mgr, self.cfg["addr"], room)
            r.init()
            r.send_metadata(pages[k * ppr:(k + 1) * ppr])
            self.objs[room] = r
        self.put("prepared")
        timeout = self.cfg["timeout"]
        poll_args = (self.cfg.get("decode_poll", "engine"), self.cfg.get("poll_sleep_us", 50.0))
        states = (polling.wait_in_order(self.objs, timeout, *poll_args)
                  if self.cfg.get("sequential") else
                  polling.wait_all(self.objs, timeout, *poll_args, mgr=self.mgr))
        cpu = self.meter.stop()
        ok_rooms = {r for r, (st, _) in states.items() if st == polling.SUCCESS}
        bad = verify_rooms(mem, self.layout, ok_rooms)
        self.put("done", {
            "states": {r: st for r, (st, _) in states.items()},
            "times": {r: t for r, (_, t) in states.items()},
            "reasons": outcomes(self.objs, states, pdkv, timeout),
            "bad_rooms": bad, "room_bytes": mem.room_bytes(ppr),
            "bytes_ok": len(ok_rooms) == len(rooms) and not bad,
            "bytes": len(pages) * mem.item * len(mem.bufs), "cpu": cpu,
            "rss": sysutil.settled_rss_bytes()})

    def _prepare_prefill(self, rooms):
        pdkv, mem = self.pdkv, self.mem
        pages, room_of, idx_of = self.layout
        if not self.cfg.get("layerwise_interval"):
            for b, buf in enumerate(mem.bufs):
                pattern.fill(buf, b, pages, room_of, idx_of, mem.offsets)
        self.meter.start()
        self.objs = {}
        for room in rooms:
            s = pdkv.KVSender(self.mgr, self.cfg["addr"], room)
            s.init(self.ppr)
            self.objs[room] = s
        # Wait for every pre-allocation so the timed part is the transfer only.
        deadline = time.monotonic() + min(PREALLOC_WAIT_S, self.cfg["timeout"])
        pacer = polling.Pacer("engine")
        while time.monotonic() < deadline and polling.any_bootstrapping(self.objs):
            pacer.wait(deadline)
        self.put("prepared")

    def go(self):
        """Prefill: send every room (or run the simulated layerwise forward), then poll."""
        pdkv, mem, ppr, cfg = self.pdkv, self.mem, self.ppr, self.cfg
        pages, room_of, idx_of = self.layout
        send_t, fwd_end = {}, None
        if cfg.get("layerwise_interval"):
            self.mgr.reserve_layerwise_cache_steps()
        for k, (room, s) in enumerate(self.objs.items()):
            # Taken BEFORE send(): a latency sample must start at a point that provably
            # precedes the decode's Success. After send() returns, a prefill preempted on a
            # busy host could stamp a time later than the decode's Success (P5 saw -44 us).
            send_t[room] = time.monotonic()
            s.send(pages[k * ppr:(k + 1) * ppr])
            if cfg.get("sequential"):
                # P5's warm samples (latency.py): one transfer in flight, the next sent as
                # soon as this one ended here; polled the way the decode polls.
                polling.wait_in_order({room: s}, cfg["timeout"], cfg.get("decode_poll", "sleep"),
                                      cfg.get("poll_sleep_us", 50.0))
        if cfg.get("layerwise_interval"):
            layer_s = cfg["layer_ms"] / 1000.0
            for layer, bufs in enumerate(self.preset.layer_buffers()):
                t0 = time.monotonic()
                for b in bufs:
                    pattern.fill(mem.bufs[b], b, pages, room_of, idx_of, mem.offsets)
                rest = layer_s - (time.monotonic() - t0)
                if rest > 0:
                    time.sleep(rest)  # the rest of the simulated layer's compute
                self.mgr.mark_layers_ready(1)
            fwd_end = time.monotonic()
        states = polling.wait_all(self.objs, cfg["timeout"], "engine", mgr=self.mgr)
        cpu = self.meter.stop()
        self.put("done", {"cpu": cpu,
            "states": {r: st for r, (st, _) in states.items()},
            "reasons": outcomes(self.objs, states, pdkv, cfg["timeout"]),
            "send_t": send_t, "forward_end": fwd_end, "rss": sysutil.settled_rss_bytes()})

    def soak(self, schedule, t0, seconds, deadline):
        import soak_rank
        self.put("done", soak_rank.run(self, schedule, t0, seconds, deadline))


def rank_main(cfg, commands, results):
    role, rank = cfg["role"], cfg["rank"]
    sysutil.die_with_parent()
    # `kill -USR1 <rank pid>` prints where a rank is stuck (a silent rank is a finding).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    r = None
    try:
        apply_settings(RANK_ENV, cfg.get("env", {}))
        if cfg.get("decode_poll") == "sleep":
            sysutil.set_timer_slack_ns(1000)
        import pdkv
        r = Rank(cfg, pdkv, results)
        r.put("ready", os.getpid())
        while True:
            cmd = commands.get()
            if cmd[0] == "stop":
                break
            if cmd[0] == "prepare":
                r.prepare(cmd[1])
            elif cmd[0] == "go":
                r.go()
            elif cmd[0] == "soak":
                r.soak(*cmd[1:])
        r.mgr.shutdown()
        results.put((role, rank, "stopped", None))
    except Exception:
        results.put((role, rank, "error", traceback.format_exc()))
