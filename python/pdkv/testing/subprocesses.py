"""Processes started from a command line (subprocess), each in a session of its own so a
kill reaches everything it started: ending one however it is (quit, hung or dead), and
those that report JSON lines on stdout (the chaos suite's ranks), read on threads so a
chatty process never blocks on a full pipe. Every one started is remembered until it is
collected, so end_all_sessions() can end them all when the driver itself is stopped:
their own sessions keep them out of the signal a terminal or `timeout` sends the
driver's process group."""
from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
import weakref


_LIVE: "weakref.WeakSet[SessionProcess]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def end_all_sessions() -> int:
    """SIGKILLs the session of every SessionProcess still running; returns how many."""
    with _LIVE_LOCK:
        live = [proc for proc in _LIVE if proc.alive()]
    for proc in live:
        proc.kill()
    return len(live)


class SessionProcess:
    """A Popen in its own session. quit() asks it to exit the way the subclass says
    (_ask_quit), waits, and kills it if it does not: "hang" then, else its exit code."""

    def __init__(self, cmd, env=None, stdout=None, stderr=None, stdin=None):
        self.p = subprocess.Popen(cmd, stdin=stdin, stdout=stdout, stderr=stderr, text=True,
                                  errors="replace", env=env, start_new_session=True)
        self.pid = self.p.pid
        self.killed = False
        with _LIVE_LOCK:
            _LIVE.add(self)

    def alive(self) -> bool:
        return self.p.poll() is None

    def kill(self) -> float:
        """SIGKILL to its whole session; returns the monotonic time just before."""
        self.killed = True
        t = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.p.wait(5)
        return t

    def _ask_quit(self) -> None:
        self.p.send_signal(signal.SIGTERM)

    def quit(self, timeout: float = 10):
        if not self.alive():
            return self.p.returncode
        self._ask_quit()
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return "hang"


class JsonLineProcess(SessionProcess):
    """A process that takes JSON commands on stdin and reports JSON events ({"ev": ...})
    on stdout; events are kept in order (`events`) and queued for wait(). The last few
    hundred lines of its stderr (its log) are kept in `err`."""

    def __init__(self, cmd, env=None, ready_timeout: float = 30, what: str = "process"):
        super().__init__(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
        self.q = queue.Queue()
        self.events = []
        self.err = []
        self.err_bytes = 0  # of all it wrote there
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        self.ready = self.wait(lambda ev: ev["ev"] == "ready", ready_timeout)
        if self.ready is None:
            self.kill()
            raise RuntimeError(f"{what} did not start: {''.join(self.err)[-2000:]}")

    def _read(self):
        for line in self.p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.events.append(ev)
            self.q.put(ev)

    def _read_err(self):
        for line in self.p.stderr:
            self.err_bytes += len(line.encode())
            self.err.append(line)
            if len(self.err) > 400:
                del self.err[:200]

    def send(self, **cmd) -> None:
        """Writes one command line; a process that is gone is not an error here."""
        try:
            self.p.stdin.write(json.dumps(cmd) + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def wait(self, pred, timeout: float):
        """The next event matching pred(event) within `timeout` s; None if none came (or
        the process ended and said nothing more)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ev = self.q.get(timeout=max(0.0, min(0.1, deadline - time.monotonic())))
            except queue.Empty:
                if self.p.poll() is not None and self.q.empty():
                    return None
                continue
            if pred(ev):
                return ev
        return None

    def _ask_quit(self) -> None:
        self.send(op="quit")
