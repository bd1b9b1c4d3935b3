"""Driver side: a bootstrap server in this process, P prefill + D decode rank processes
(spawned, so each is a fresh interpreter), and the per-round command sequence."""
from __future__ import annotations

import multiprocessing as mp
import sys
import time

import ranks

CTX = mp.get_context("spawn")


class Cluster:
    def __init__(self, pdkv, base_cfg: dict, prefill_tp: int, decode_tp: int):
        self.server = pdkv.BootstrapServer("127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self.server.port}"
        self.results = CTX.Queue()
        self.cmds, self.procs, self.pids = {}, {}, {}
        for role, tp in (("prefill", prefill_tp), ("decode", decode_tp)):
            for r in range(tp):
                cfg = dict(base_cfg, role=role, rank=r, tp=tp, addr=self.addr)
                q = CTX.Queue()
                self.cmds[(role, r)] = q
                self.procs[(role, r)] = CTX.Process(target=ranks.rank_main,
                                                    args=(cfg, q, self.results), daemon=True)
        for p in self.procs.values():
            p.start()
        self.pids = {k: v for k, v in self._collect("ready", list(self.procs), 120).items()}

    def _collect(self, kind, keys, timeout):
        got, deadline = {}, time.monotonic() + timeout
        while len(got) < len(keys):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"ranks {sorted(set(keys) - set(got))} sent no {kind!r}")
            try:
                role, rank, k, payload = self.results.get(timeout=min(left, 1.0))
            except Exception:
                continue
            if k == "error":
                raise RuntimeError(f"{role} rank {rank} failed:\n{payload}")
            if k == kind:
                got[(role, rank)] = payload
        return got

    def _send(self, role, cmd):
        for (r, _), q in self.cmds.items():
            if r == role:
                q.put(cmd)

    def _keys(self, role):
        return [k for k in self.procs if k[0] == role]

    def run_round(self, rooms, timeout):
        """One round; returns {(role, rank): done payload}."""
        self._send("decode", ("prepare", rooms))
        self._collect("prepared", self._keys("decode"), timeout)
        self._send("prefill", ("prepare", rooms))
        self._collect("prepared", self._keys("prefill"), timeout)
        self._send("prefill", ("go",))
        return self._collect("done", list(self.procs), timeout)

    def close(self):
        for q in self.cmds.values():
            q.put(("stop",))
        for p in self.procs.values():
            p.join(20)
            if p.is_alive():
                p.kill()
        self.server.stop()


def progress(label: str, i: int, n: int, extra: str = "") -> None:
    bar = "#" * int(30 * i / max(n, 1))
    sys.stderr.write(f"\r{label} [{bar:<30}] {i}/{n} {extra}   ")
    if i >= n:
        sys.stderr.write("\n")
    sys.stderr.flush()
