"""P13: the CPU a room costs at the scale case's load, per side, above the bytes it carries.

Each rank meters one round's room work (CpuMeter): from its first KVSender / KVReceiver of
the round until every room ended there, leaving out the bench's own pattern fill and byte
check. It reports
- process_s: its process's CPU (getrusage: every thread, user + system);
- poll_s: CPU of the Python `poll()` passes (time.thread_time() around each pass, so the
  per-call interpreter and binding cost is in it, not only the C++ behind it);
- stages_s: the managers' own per-stage CPU counters, when the library exports them
  (KVManager.metrics()["cpu_seconds"]: per-thread CPU clocks taken around each stage);
- threads_s: CPU per thread name (/proc/self/task/*/stat), a cross-check of the split.

The driver sums a side's ranks per timed round, divides by the round's rooms, and
subtracts what the engines alone spend per room moving the same round at the same
topology (`pdkv bench engine ... --pairs`, its JSON `cpu_s_per_round`, measured in the same
invocation): P13 = (pdkv CPU - engine CPU) / rooms, microseconds per room per side."""
from __future__ import annotations

import os
import resource
import time

from report import med

SIDES = ("prefill", "decode")
# The engine bench's side that carries each pdkv side's bytes.
ENGINE_SIDE = {"prefill": "sender", "decode": "receiver"}

_poll_s = 0.0


def add_poll_cpu(seconds: float) -> None:
    """Called by polling.py around each poll pass (and the prefill's pre-allocation wait)."""
    global _poll_s
    _poll_s += seconds


def _process_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _threads_s() -> dict:
    """{thread name: CPU s} over the live threads; the main thread is "main"."""
    tick, pid, out = os.sysconf("SC_CLK_TCK"), os.getpid(), {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                line = f.read()
        except OSError:
            continue  # the thread ended meanwhile
        close = line.rfind(")")
        name = "main" if int(tid) == pid else line[line.find("(") + 1:close]
        fields = line[close + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _stages_s(mgr) -> dict:
    try:
        return dict(mgr.metrics().get("cpu_seconds", {}))
    except Exception:  # an older library: no per-stage counters
        return {}


def _delta(after: dict, before: dict) -> dict:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


class CpuMeter:
    """One rank's CPU over one round's room work (start() ... stop())."""

    def __init__(self, mgr):
        self.mgr, self.t0 = mgr, None

    def start(self) -> None:
        self.t0 = (_process_s(), _poll_s, _stages_s(self.mgr), _threads_s(), time.monotonic())

    def stop(self) -> dict:
        if self.t0 is None:
            return {}
        p, poll, stages, threads, t = self.t0
        self.t0 = None
        return {"process_s": _process_s() - p, "poll_s": _poll_s - poll,
                "stages_s": _delta(_stages_s(self.mgr), stages),
                "threads_s": _delta(_threads_s(), threads), "wall_s": time.monotonic() - t}


def add_round(acc: list, done: dict, rooms: int) -> None:
    """One timed round's per-room CPU per side (us) from the ranks' "done" payloads."""
    per = {}
    for side in SIDES:
        cpus = [v.get("cpu") for k, v in done.items() if k[0] == side]
        if not cpus or not all(cpus):
            return  # a rank lost or without a meter: no figure for this round
        stages, threads = {}, {}
        for c in cpus:
            for k, v in c["stages_s"].items():
                stages[k] = stages.get(k, 0.0) + v
            for k, v in c["threads_s"].items():
                threads[k] = threads.get(k, 0.0) + v
        us = 1e6 / rooms
        per[side] = {"process_us": sum(c["process_s"] for c in cpus) * us,
                     "python_poll_us": sum(c["poll_s"] for c in cpus) * us,
                     "stages_us": {k: v * us for k, v in stages.items()},
                     "threads_us": {k: v * us for k, v in threads.items()}}
    acc.append(per)


def figure(acc: list, engine: dict, rooms: int) -> dict:
    """P13 of one run: medians over its timed rounds, minus the engines alone. `engine`:
    the engine bench's figure at the topology (cpu_s_per_round of its whole round, which
    is the scale case's round)."""
    if not acc:
        return {"value": None, "unit": "us/room", "why": "no timed round was metered"}
    cpu = (engine or {}).get("cpu_s_per_round") or {}
    out = {"unit": "us/room", "rounds": len(acc), "rooms_per_round": rooms}
    for side in SIDES:
        rows = [r[side] for r in acc]
        process = med([r["process_us"] for r in rows])
        eng = cpu.get(ENGINE_SIDE[side])
        eng_us = eng * 1e6 / rooms if eng is not None else None
        keys = sorted({k for r in rows for k in r["stages_us"]})
        names = sorted({k for r in rows for k in r["threads_us"]})
        out[side] = {
            "value": process - eng_us if eng_us is not None else None,
            "process_us": process, "engine_us": eng_us,
            "stages_us": dict({k: med([r["stages_us"].get(k, 0.0) for r in rows]) for k in keys},
                              python_poll=med([r["python_poll_us"] for r in rows])),
            "threads_us": {k: med([r["threads_us"].get(k, 0.0) for r in rows]) for k in names}}
    vals = [out[s]["value"] for s in SIDES]
    out["value"] = sum(vals) if all(v is not None for v in vals) else None
    return out


def aggregate(runs: list) -> dict:
    """P13 over --repeat runs: the median of each side's figures."""
    figs = [r["P13"] for r in runs if r.get("P13", {}).get("value") is not None]
    if not figs:
        return {"value": None, "unit": "us/room", "runs": [r.get("P13") for r in runs]}
    out = {"value": med([f["value"] for f in figs]), "unit": "us/room"}
    for side in SIDES:
        out[side] = {k: med([f[side][k] for f in figs])
                     for k in ("value", "process_us", "engine_us")}
        out[side]["stages_us"] = {k: med([f[side]["stages_us"].get(k) for f in figs])
                                  for k in figs[-1][side]["stages_us"]}
    out["runs"] = [r.get("P13") for r in runs]
    return out
