"""Rank processes that the test drives step by step, for concurrency and liveness tests.

kv_harness.Cluster runs each rank through one fixed script; the scenarios of
test_kv_concurrency.py need to act between the steps (stop or kill a rank once its rooms are
bootstrapped or a layer went out, mark layers slowly while other rooms go at once, open new
rooms after a kill) and to know *when* each room ended. So here each rank is a spawned
process that holds one KVManager and executes commands sent over its own pipe:

  open, wait_state, send, reserve, forward (runs in a thread), watch, active, exit

`watch` polls every room of the rank in one loop and stamps the moment each one became
terminal with time.monotonic() (CLOCK_MONOTONIC is system-wide on Linux, so stamps from
different processes and the test compare directly); then a decode checks every byte of each
Success room (pdkv.testing's pattern: buffer, page, token, head, byte, room) and that no
byte outside its rooms' pages was written. `forward` sends an event after each layer it
marks, so the test can act mid-transfer.

Every rank has its own pipe (not one shared queue): a rank killed with SIGKILL while it
writes can then break nothing but its own channel.
"""
from __future__ import annotations

import collections
import contextlib
import os
import signal
import threading
import time
import traceback

import numpy as np

from kv_harness import RankMemory, Shape, pages_for
from pdkv.testing import QUIET, room_timeouts, transfer_error, wait_until
from pdkv.testing.bootstrap import LoopbackBootstrap
from pdkv.testing.processes import SPAWN, join_or_kill, kill

# Room timeouts short enough that a lost room ends inside the test instead of at 120/300 s;
# they are not liveness settings and far longer than any scenario here. Liveness is
# pdkv.testing.DEFAULT_LIVENESS where a test is about it.
ROOM_TIMEOUT_ENV = room_timeouts(40, 50)

# "layerwise" argument of the send command that means "do not pass the keyword at all".
OMIT = "omit"


# --- the rank process ---------------------------------------------------------------------

class _Rank:
    def __init__(self, pdkv, cfg: dict, conn):
        self.pdkv, self.cfg, self.conn = pdkv, cfg, conn
        self.shape: Shape = cfg["shape"]
        self.role, self.tp, self.dp = cfg["role"], cfg["tp"], cfg["dp"]
        self.rank = cfg["engine_rank"]
        self.group, in_group = divmod(self.rank, self.tp)
        self.mem = RankMemory(self.shape, self.tp, in_group)
        self.universe = cfg["universe"]
        self.mgr = pdkv.KVManager(self.mem.kv_args(pdkv, self.rank, self.tp, self.dp),
                                  self.role, cfg["addr"],
                                  layerwise_interval=cfg.get("layerwise_interval", 0))
        self.rooms = {}  # room -> (sender or receiver, pages on this rank)
        self.forward_thread = None
        self._send_mu = threading.Lock()  # replies (main thread) and forward events

    def send(self, msg) -> None:
        with self._send_mu:
            self.conn.send(msg)

    def _pages(self, room: int, n: int) -> np.ndarray:
        side = "src" if self.role == "prefill" else "dst"
        return pages_for(self.universe, room, self.rank, n, self.shape.capacity, side)

    def _mine(self, rooms) -> list:
        # Prefill: the decode sends room r to prefill DP group r % dp. Decode: the test's
        # router sends room r to decode DP group r % dp (as kv_harness does).
        return [r for r in rooms if r % self.dp == self.group]

    def cmd_open(self, rooms, pages: int, fill: bool = True):
        pdkv, opened = self.pdkv, []
        for room in self._mine(rooms):
            p = self._pages(room, pages)
            if self.role == "prefill":
                obj = pdkv.KVSender(self.mgr, self.cfg["addr"], room)
                obj.init(pages)
                if fill:  # otherwise the simulated forward writes the pages layer by layer
                    self.mem.fill(room, p)
            else:
                obj = pdkv.KVReceiver(self.mgr, self.cfg["addr"], room)
                obj.init()
                obj.send_metadata(p)
            self.rooms[room] = (obj, p)
            opened.append(room)
        return opened

    def cmd_wait_state(self, at_least: int, timeout: float, rooms=None):
        """Waits until every (given) room is at `at_least` or terminal; returns the states."""
        rooms = self._mine(rooms) if rooms is not None else list(self.rooms)
        states = {}

        def reached():
            states.update({r: int(self.rooms[r][0].poll()) for r in rooms})
            return all(s >= at_least or s == 0 for s in states.values())

        wait_until(reached, timeout)
        return states

    def cmd_send(self, rooms, chunks: int = 1, layerwise=OMIT):
        t0 = time.monotonic()
        for room in self._mine(rooms):
            sender, src = self.rooms[room]
            for c in np.array_split(src, chunks):
                if layerwise == OMIT:
                    sender.send(c)
                else:
                    sender.send(c, layerwise=layerwise)
        return t0, time.monotonic()

    def cmd_reserve(self):
        return self.mgr.reserve_layerwise_cache_steps()

    def cmd_forward(self, rooms, layer_ms: float):
        """Starts a simulated forward pass in a thread and returns at once (so `watch` can
        run meanwhile): each layer takes layer_ms, then its KV is written into the rooms'
        pages and the layer is marked ready. Events: ("layer", (layer, t)) after each
        mark, then ("forward_done", (t_start, t_last_mark)) or ("forward_error", traceback);
        each t_mark is taken just before its mark_layers_ready call."""
        rooms = self._mine(rooms)
        if self.forward_thread is not None:
            self.forward_thread.join()

        def run():
            try:
                t0 = t_mark = time.monotonic()
                for layer in range(self.shape.layers):
                    time.sleep(layer_ms / 1000.0)
                    for room in rooms:
                        self.mem.fill_layer(room, self.rooms[room][1], layer)
                    # Stamped before the mark: nothing that depends on it can end earlier.
                    t_mark = time.monotonic()
                    self.mgr.mark_layers_ready(1)
                    self.send(("event", "layer", (layer, t_mark)))
                self.send(("event", "forward_done", (t0, t_mark)))
            except Exception:
                self.send(("event", "forward_error", traceback.format_exc()))

        self.forward_thread = threading.Thread(target=run, daemon=True)
        self.forward_thread.start()
        return time.monotonic()

    def cmd_watch(self, timeout: float, rooms=None):
        """Polls the rooms until all are terminal: {room: state, t, reason, bytes_ok}.

        Each room is stamped when its state is first seen terminal; the bytes of a decode's
        Success rooms are checked after the loop, so checking one room never delays the
        stamp of another (and the check sees the final memory, after every other room)."""
        pdkv = self.pdkv
        rooms = self._mine(rooms) if rooms is not None else list(self.rooms)
        out, pending = {}, list(rooms)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            still = []
            for room in pending:
                state = self.rooms[room][0].poll()
                if state in (pdkv.KVPoll.Success, pdkv.KVPoll.Failed):
                    out[room] = {"state": int(state), "t": time.monotonic()}
                else:
                    still.append(room)
            pending = still
            if pending:
                time.sleep(0.002)
        for room in pending:
            out[room] = {"state": int(self.rooms[room][0].poll()), "t": None}
        for room, r in out.items():
            obj, pages = self.rooms[room]
            e = transfer_error(obj)
            r["reason"] = None if e is None else str(e)
            r["bytes_ok"] = None
            if self.role == "decode" and r["state"] == int(pdkv.KVPoll.Success):
                r["bytes_ok"] = bool(self.mem.holds(room, pages))
        result = {"rooms": out}
        if self.role == "decode":
            result["stray_bytes"] = self._stray_bytes()
        return result

    def _stray_bytes(self) -> int:
        """Non-zero bytes in pages that belong to no room this rank opened."""
        used = np.zeros(self.shape.capacity, bool)
        for _, pages in self.rooms.values():
            used[pages] = True
        return int(sum(np.count_nonzero(b[~used]) for b in self.mem.bufs))

    def cmd_active(self, timeout: float = 5.0):
        wait_until(lambda: not self.mgr.active_rooms(), timeout, 0.01)
        return self.mgr.active_rooms()


def rank_main(cfg: dict, conn) -> None:
    try:
        os.environ.update(cfg["env"])
        import pdkv
        rank = _Rank(pdkv, cfg, conn)
        rank.send(("ready", "start", {"pid": os.getpid(),
                                      "control": rank.mgr.control_endpoint}))
    except Exception:
        conn.send(("error", "start", traceback.format_exc()))
        return
    try:
        while True:
            try:
                name, kwargs = conn.recv()
            except EOFError:  # the test is gone
                break
            if name == "exit":
                break
            try:
                result = getattr(rank, "cmd_" + name)(**kwargs)
            except Exception:
                rank.send(("error", name, traceback.format_exc()))
            else:
                rank.send(("reply", name, result))
    finally:
        if rank.forward_thread is not None:
            rank.forward_thread.join()
        rank.mgr.shutdown()


# --- the test side --------------------------------------------------------------------------

class RankError(AssertionError):
    pass


class RankProcess:
    """One rank process and its command pipe. Commands are pipelined: `call` sends at once,
    `reply` waits for the answers in order; events that arrive meanwhile are kept."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.name = f"{cfg['role']} {cfg['engine_rank']}"
        self.conn, child = SPAWN.Pipe()
        self.proc = SPAWN.Process(target=rank_main, args=(cfg, child), daemon=True)
        self._child = child
        self.events, self.replies = [], collections.deque()
        self.info = None
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self) -> "RankProcess":
        self.proc.start()
        self._child.close()
        return self

    def _recv(self, timeout: float) -> bool:
        """Moves one message from the pipe into events or replies; False on timeout."""
        if not self.conn.poll(timeout):
            if not self.proc.is_alive() and not self.conn.poll(0):
                raise RankError(f"{self.name}: process died (exit code {self.proc.exitcode})")
            return False
        try:
            msg = self.conn.recv()
        except EOFError:
            raise RankError(f"{self.name}: process closed its pipe "
                            f"(exit code {self.proc.exitcode})")
        if msg[0] == "event":
            self.events.append(msg[1:])
        else:
            self.replies.append(msg)
        return True

    def _next(self, timeout: float):
        deadline = time.monotonic() + timeout
        while not self.replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RankError(f"{self.name}: no answer within {timeout:.1f} s")
            self._recv(min(left, 0.1))
        return self.replies.popleft()

    def wait_ready(self, timeout: float = 60) -> dict:
        kind, _, payload = self._next(timeout)
        if kind != "ready":
            raise RankError(f"{self.name} failed to start:\n{payload}")
        self.info = payload
        return payload

    def call(self, name: str, **kwargs) -> "RankProcess":
        self.conn.send((name, kwargs))
        return self

    def reply(self, timeout: float = 60):
        kind, name, payload = self._next(timeout)
        if kind != "reply":
            raise RankError(f"{self.name}: command {name} failed:\n{payload}")
        return payload

    def run(self, name: str, **kwargs):
        """call + reply; waits the command's own `timeout` (if any) plus a minute."""
        return self.call(name, **kwargs).reply(60 + kwargs.get("timeout", 0))

    def wait_event(self, pred, timeout: float):
        """Waits for an event matching pred(kind, payload); replies meanwhile are kept."""
        deadline = time.monotonic() + timeout
        while True:
            for kind, payload in self.events:
                if kind.endswith("error"):
                    raise RankError(f"{self.name}: {kind}:\n{payload}")
                if pred(kind, payload):
                    return kind, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise RankError(f"{self.name}: expected event did not come within {timeout} s")
            self._recv(min(left, 0.05))

    def signal(self, sig: int) -> float:
        """Sends `sig`; returns the monotonic time just before it was sent."""
        t = time.monotonic()
        os.kill(self.proc.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False
        return t

    def kill(self) -> float:
        return kill(self.proc)

    def alive(self) -> bool:
        return self.proc.is_alive()

    def request_exit(self) -> None:
        """Resumes a stopped rank and asks it to shut its manager down and exit."""
        if self.proc.pid is None:
            return
        if self.stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.stopped = False
        if self.proc.is_alive():
            with contextlib.suppress(Exception):
                self.conn.send(("exit", {}))

    def close(self, deadline: float) -> None:
        """Waits for the exit until `deadline` (monotonic; a rank still busy with a command
        of a failed test may not get there), then kills."""
        join_or_kill([self.proc], deadline)
        self.conn.close()


class Ranks:
    """A bootstrap server in this process and rank processes started on demand; closing it
    (also on failure) resumes stopped ranks, ends every rank and stops the server."""

    def __init__(self, pdkv, shape: Shape, universe, env: dict):
        self.pdkv, self.shape, self.universe = pdkv, shape, list(universe)
        self.env = dict(QUIET, **env)
        self.server = LoopbackBootstrap(pdkv)
        self.addr = self.server.addr
        self.all = []

    def add(self, role: str, engine_rank: int, tp: int = 1, dp: int = 1,
            layerwise_interval: int = 0) -> RankProcess:
        cfg = dict(role=role, engine_rank=engine_rank, tp=tp, dp=dp, shape=self.shape,
                   universe=self.universe, addr=self.addr, env=self.env,
                   layerwise_interval=layerwise_interval)
        r = RankProcess(cfg).start()
        self.all.append(r)
        return r

    def ready(self, *ranks: RankProcess, timeout: float = 60) -> None:
        for r in ranks:
            r.wait_ready(timeout)

    def close(self) -> None:
        for r in self.all:
            r.request_exit()
        deadline = time.monotonic() + 10
        for r in self.all:
            r.close(deadline)
        self.server.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
