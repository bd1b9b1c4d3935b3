"""Shared pieces of the engine replay tests (vLLM and sglang adapters across processes).

Each instance rank is a spawned process holding real CPU torch tensors shaped as the
engine allocates them. Values name (layer, K/V, token, model head, element, request), so
a byte of the wrong layer, token, head or request is caught on the decode. Ranks talk to
the test through queues: the test plays the router/proxy (it forwards transfer
parameters from the prefill to the decode) and checks what each rank reports.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import time
import traceback

from pdkv.testing import FAST_TIMEOUTS, apply_settings, liveness_bound_s

# fork, not spawn: the test imports torch once and every rank inherits it (a spawned
# rank would re-import it, ~4 s each on a loaded CI host). Safe because nothing has
# started a thread when the ranks fork: the bootstrap server starts after them
# (Ranks.serve_bootstrap) and torch starts its thread pools lazily.
CTX = mp.get_context("fork")
STANDINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standins")
# R2 (RELIABILITY.md): a killed prefill rank fails the decode rooms within heartbeat
# interval x max failures + 1 s, 1.6 s with FAST_TIMEOUTS; the adapters must pass it on as fast.
FAILURE_BOUND_S = liveness_bound_s(FAST_TIMEOUTS)


def use_standins() -> None:
    """Puts the engine stand-ins first on sys.path (tests only; never with real engines)."""
    if STANDINS not in sys.path:
        sys.path.insert(0, STANDINS)


def pattern(torch, layer: int, kv: int, tokens: range, first_head: int, n_heads: int,
            head_dim: int, seed: int, dtype):
    """(len(tokens), n_heads, head_dim) values < 251: exact in float16 and bfloat16."""
    t = torch.tensor(list(tokens), dtype=torch.int64).view(-1, 1, 1)
    h = torch.arange(first_head, first_head + n_heads, dtype=torch.int64).view(1, -1, 1)
    d = torch.arange(head_dim, dtype=torch.int64).view(1, 1, -1)
    v = (layer * 37 + kv * 101 + t * 13 + h * 7 + d * 3 + seed * 29 + 1) % 251
    return v.to(dtype)


def block_allocator(seed: int, num_blocks: int):
    """Hands out block ids in a fixed shuffled order (a fragmented pool); the same on
    every rank of an instance, as the engine's block table is."""
    import random
    order = list(range(1, num_blocks))  # block 0 stays unused (vLLM's null block)
    random.Random(seed).shuffle(order)

    def alloc(n: int) -> list[int]:
        out = order[:n]
        del order[:n]
        if len(out) < n:
            raise RuntimeError("out of blocks")
        return out
    return alloc


def rank_entry(target, cfg: dict, out_q, in_q) -> None:
    """Process body: runs target(cfg, out_q, in_q), reporting any exception."""
    try:
        use_standins()
        apply_settings(FAST_TIMEOUTS, cfg.get("env"))
        msg = in_q.get(timeout=60)  # the bootstrap server starts once every rank forked
        assert msg[0] == "addr", msg
        target(dict(cfg, addr=msg[1]), out_q, in_q)
    except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
        out_q.put(("error", cfg.get("name"), traceback.format_exc()))


class Ranks:
    """Spawned rank processes, each with its own inbox, and one shared outbox."""

    def __init__(self):
        self.out = CTX.Queue()
        self.procs: dict[str, mp.Process] = {}
        self.inbox: dict[str, object] = {}
        self.backlog: list = []

    def start(self, name: str, target, cfg: dict) -> None:
        cfg = dict(cfg, name=name)
        self.inbox[name] = CTX.Queue()
        p = CTX.Process(target=rank_entry, args=(target, cfg, self.out, self.inbox[name]),
                        daemon=True)
        p.start()
        self.procs[name] = p

    def serve_bootstrap(self):
        """Starts the bootstrap server (after every rank forked) and tells the ranks
        its address; returns the server (stop it when done) and the address."""
        import pdkv
        server = pdkv.BootstrapServer("127.0.0.1", 0)
        addr = f"127.0.0.1:{server.port}"
        for name in self.inbox:
            self.inbox[name].put(("addr", addr))
        self.server = server
        return addr

    def send(self, name: str, msg) -> None:
        self.inbox[name].put(msg)

    def expect(self, kind: str, count: int = 1, timeout: float = 60.0) -> list:
        """The next `count` messages of this kind (messages of other kinds are kept)."""
        got = [m for m in self.backlog if m[0] == kind][:count]
        for m in got:
            self.backlog.remove(m)
        deadline = time.monotonic() + timeout
        while len(got) < count:
            try:
                msg = self.out.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"timed out waiting for {count} {kind!r} messages, "
                                     f"got {len(got)}") from None
            if msg[0] == "error":
                raise AssertionError(f"rank {msg[1]} failed:\n{msg[2]}")
            if msg[0] == kind:
                got.append(msg)
            else:
                self.backlog.append(msg)
        return got

    def kill(self, name: str) -> None:
        self.procs[name].kill()
        self.procs[name].join(5)

    def close(self) -> None:
        if getattr(self, "server", None) is not None:
            self.server.stop()
        for name, p in self.procs.items():
            if p.is_alive():
                self.inbox[name].put(("stop",))
        for p in self.procs.values():
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def wait_stop(in_q, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if in_q.get(timeout=0.5)[0] == "stop":
                return
        except queue.Empty:
            pass
