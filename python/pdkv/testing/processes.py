"""Rank processes spawned from Python (multiprocessing): starting one with the environment
it needs from its first instruction, and ending them however they are (exiting, hung,
stopped or already dead) without ever raising, so teardown can run after any failure.

Spawned, never forked: each rank is a fresh interpreter, so no lock or thread of the
driver (a bootstrap server, a KVManager) is copied into it half-held."""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import time

from .subprocesses import end_all_sessions

SPAWN = mp.get_context("spawn")

_PR_SET_PDEATHSIG = 1


def prctl(option: int, value: int) -> bool:
    """prctl(2) on this thread; False where the call is unavailable or refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent() -> bool:
    """SIGKILL this process when its parent dies: a driver killed with -9 (or crashing)
    must not leave ranks or CPU hogs running on a machine shared with other work."""
    return prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def end_all_children() -> None:
    """Ends every process this one started and still runs: SessionProcesses (their
    whole sessions) and multiprocessing children. Never raises."""
    with contextlib.suppress(Exception):
        end_all_sessions()
    for child in mp.active_children():
        with contextlib.suppress(Exception):
            child.kill()
            child.join(5)


def end_children_when_stopped() -> None:
    """For a command that starts processes (a driver such as `pdkv chaos`): SIGTERM and
    SIGHUP (`timeout`, a closed terminal, a service manager) exit it through SystemExit,
    so its `finally` blocks tear down what they set up, and at exit every child still
    running is ended. Python's default for SIGTERM ends the process at once, leaving
    children in their own sessions (a bootstrap server holding its port) behind. Call it
    once, from the main thread."""
    def stop(signum, frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    atexit.register(end_all_children)


@contextlib.contextmanager
def scoped_env(env=None):
    """`env` ({VAR: value}) in this process's environment for the `with` block only: what
    is built or started inside reads it (a bootstrap server its PDKV_SECRET_FILE, a
    spawned child everything); afterwards the environment is as before."""
    env = env or {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def start_with_env(proc, env=None) -> None:
    """Starts `proc` with `env` ({VAR: value}) in its environment from its first
    instruction (LD_PRELOAD must be there when the process starts)."""
    with scoped_env(env):
        proc.start()


def kill(proc, join_s: float = 5.0) -> float:
    """SIGKILL (a crash, as the rank's peers see it); returns the monotonic time just
    before it was sent."""
    t = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(join_s)
    return t


def join_or_kill(procs, deadline: float, min_wait_s: float = 0.0) -> None:
    """Waits for each process to exit until `deadline` (monotonic; at least `min_wait_s`
    each), then kills the ones still there. Processes never started are skipped."""
    for p in procs:
        if p.pid is None:
            continue
        p.join(max(min_wait_s, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5)


class PipedProcess:
    """A spawned `target(*args, conn)` spoken to over a pipe: it sends (kind, payload)
    messages and ends with ("bye", None) when sent None. A context manager."""

    def __init__(self, name: str, target, args=(), env=None):
        self.name = name
        self.conn, child = SPAWN.Pipe()
        self.proc = SPAWN.Process(target=target, args=(*args, child))
        start_with_env(self.proc, env)

    def expect(self, kind, timeout):
        if not self.conn.poll(timeout):
            raise AssertionError(f"{self.name}: no {kind} within {timeout} s")
        got, payload = self.conn.recv()
        assert got == kind, f"{self.name}: {got}: {payload}"
        return payload

    def close(self):
        try:
            self.conn.send(None)
            self.expect("bye", 20)
        finally:
            join_or_kill([self.proc], time.monotonic() + 10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
