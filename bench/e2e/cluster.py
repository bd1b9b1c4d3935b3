"""Driver side: a bootstrap server in this process, P prefill + D decode rank processes
(spawned, so each is a fresh interpreter), and the per-round command sequence.

Nothing here raises because a rank misbehaved: a rank that dies, raises or stays silent
past a stage's timeout is logged in the run's FailureLog (with the rooms it leaves without
an outcome) and left out of later stages, so the run still ends with a JSON that says what
happened. `healthy` turns False at the first such problem; callers stop the run there."""
from __future__ import annotations

import os
import signal
import sys
import time

from pdkv.testing.bootstrap import LoopbackBootstrap
from pdkv.testing.processes import SPAWN, join_or_kill
from pdkv.testing.reports import drain_reports

import ranks

READY_TIMEOUT_S = 120.0
# A rank gives up on its rooms after the bench's --timeout and then reports them; the
# driver waits this much longer before it calls the rank silent.
DONE_MARGIN_S = 60.0
STOP_JOIN_S = 20.0


def rank_name(key) -> str:
    return f"{key[0]}{key[1]}"


class Cluster:
    def __init__(self, pdkv, base_cfg: dict, prefill_tp: int, decode_tp: int, log,
                 rank_main=ranks.rank_main):
        self.log, self.healthy = log, True
        self.server = LoopbackBootstrap(pdkv)
        self.addr = self.server.addr
        self.results = SPAWN.Queue()
        self.cmds, self.procs, self.pids, self.lost, self.early = {}, {}, {}, set(), {}
        for role, tp in (("prefill", prefill_tp), ("decode", decode_tp)):
            for r in range(tp):
                cfg = dict(base_cfg, role=role, rank=r, tp=tp, addr=self.addr)
                q = SPAWN.Queue()
                self.cmds[(role, r)] = q
                self.procs[(role, r)] = SPAWN.Process(target=rank_main,
                                                      args=(cfg, q, self.results), daemon=True)
        for p in self.procs.values():
            p.start()
        self.pids = self.collect("ready", list(self.procs), READY_TIMEOUT_S)

    def _lose(self, key, why: str, rooms) -> None:
        self.lost.add(key)
        self.healthy = False
        self.log.problem(rank_name(key), why, time.monotonic(), rooms)

    def collect(self, kind, keys, timeout, rooms=(), on_progress=None) -> dict:
        """{key: payload} of message `kind` from each live rank in `keys`; ranks that die,
        raise or stay silent for `timeout` s are logged (leaving `rooms` failed) instead."""
        got, deadline = {}, time.monotonic() + timeout
        for key in keys:  # reported while the driver waited for another stage
            if (key, kind) in self.early:
                got[key] = self.early.pop((key, kind))
        waiting = lambda: [k for k in keys if k not in got and k not in self.lost]  # noqa

        def find_dead():
            for key in waiting():
                if not self.procs[key].is_alive():
                    self._lose(key, f"rank process died (exit code "
                               f"{self.procs[key].exitcode}) before sending {kind!r}", rooms)

        drain_reports(self.results, lambda: not waiting(), deadline,
                      lambda msg: self._take(msg, kind, keys, got, rooms, on_progress),
                      on_idle=find_dead, poll_s=0.5)
        for key in waiting():
            self._lose(key, f"rank sent no {kind!r} within {timeout:.0f} s (timed out)", rooms)
        return got

    def _take(self, msg, kind, keys, got, rooms, on_progress) -> None:
        role, rank, k, payload = msg
        key = (role, rank)
        if k == "error":
            sys.stderr.write(f"{rank_name(key)} raised:\n{payload}")
            self._lose(key, f"rank raised {payload.strip().splitlines()[-1]}", rooms)
        elif k == kind and key in keys:
            got[key] = payload
        elif k == "progress":
            if on_progress:
                on_progress(key, payload)
        else:
            # A decode whose rooms all failed at once reports "done" while the driver still
            # waits for the prefills' "prepared" (dropping it cost a whole --timeout).
            self.early[(key, k)] = payload

    def send(self, role, cmd) -> list:
        """Queue `cmd` to every live rank of `role` (None: every role); the keys sent to."""
        keys = [k for k in self.cmds if (role is None or k[0] == role) and k not in self.lost]
        for k in keys:
            self.cmds[k].put(cmd)
        return keys

    def run_round(self, rooms, timeout) -> dict:
        """One round; {(role, rank): done payload} of the ranks that reported. A stage
        that loses a rank goes on with the others, so their rooms' reasons are reported."""
        self.collect("prepared", self.send("decode", ("prepare", rooms)), timeout, rooms)
        self.collect("prepared", self.send("prefill", ("prepare", rooms)), timeout, rooms)
        self.send("prefill", ("go",))
        return self.collect("done", [k for k in self.procs if k not in self.lost],
                            timeout + DONE_MARGIN_S, rooms)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Fault injection (--kill-rank): signal the rank named like 'decode0' (SIGKILL: a
        dead rank; SIGSTOP: a hung one, which close() still kills)."""
        for key, p in self.procs.items():
            if rank_name(key) == name and p.pid:
                os.kill(p.pid, sig)
                return
        raise ValueError(f"no rank {name!r}; ranks are {[rank_name(k) for k in self.procs]}")

    def close(self) -> None:
        """Stop every rank (kill one that does not stop in time) and the server; never
        raises, so it can run in a finally block after any failure."""
        for k, q in self.cmds.items():
            if k not in self.lost:
                q.put(("stop",))
        join_or_kill(self.procs.values(), time.monotonic() + STOP_JOIN_S, min_wait_s=0.1)
        self.server.stop()  # never raises: the run's figures matter more


def progress(label: str, i: int, n: int, extra: str = "") -> None:
    """Round i of n: a tqdm bar on a terminal, plain lines in a captured log (pdkv._progress)."""
    from pdkv import _progress

    _progress.show(label, i, n, extra)
