"""CPU hogs beside a cluster: N busy-loop processes that compete with the ranks for the
cores, so liveness and transfers are measured (or tested) on a saturated host.

Each hog is `nice -n 0 sh -c 'while :; do :; done'`: `nice -n 0` adds nothing, so a hog runs
at the caller's own priority (0 in CI; 10 when a bench is started under `nice -n 10` on a
shared machine): it competes with the ranks as an equal, never above them, and never above
other work on the machine that the caller already yields to.
Use as a context manager; hogs are killed on exit, on exceptions, and (PR_SET_PDEATHSIG)
even when the driver itself is killed, so none is ever orphaned."""
from __future__ import annotations

import os
import subprocess

from .processes import die_with_parent

_LOOP = ["nice", "-n", "0", "sh", "-c", "while :; do :; done"]


class Hogs:
    def __init__(self, n: int):
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Hogs":
        try:
            for _ in range(self.n):
                self.procs.append(subprocess.Popen(_LOOP, preexec_fn=die_with_parent,
                                                   stdin=subprocess.DEVNULL))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def niceness(self):
        """Niceness the hogs really run at (None without hogs or once they ended)."""
        for p in self.procs:
            try:
                return os.getpriority(os.PRIO_PROCESS, p.pid)
            except OSError:
                continue
        return None

    def cpu_seconds(self) -> float:
        """CPU seconds the hogs have used so far (to prove they ran); raises if one
        exited."""
        total = 0.0
        for p in self.procs:
            if p.poll() is not None:
                raise AssertionError(f"CPU hog {p.pid} exited ({p.returncode})")
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()  # a busy loop holds nothing to clean up
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []

    def describe(self) -> dict:
        return {"hogs": self.n, "hog_nice": self.niceness(),
                "hog_cmd": " ".join(_LOOP) if self.n else None}
