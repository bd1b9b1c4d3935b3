"""Multi-process scenarios for the pdkv KV API: a real bootstrap server, prefill and
decode ranks as separate processes over loopback (ZeroMQ control plane, TCP engine).

Each rank fills or checks its KV pages with a pattern that names (buffer, request page,
token, model head, byte, room), so a byte in the wrong place, of the wrong head or of the
wrong room is caught. Ranks report to the test through a multiprocessing queue.
"""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import signal
import time
import traceback
import zlib

import numpy as np

CTX = mp.get_context("spawn")

FAST_ENV = {
    "PDKV_HEARTBEAT_INTERVAL_S": "0.2",
    "PDKV_HEARTBEAT_MAX_FAILURES": "3",
    "PDKV_BOOTSTRAP_TIMEOUT_S": "20",
    "PDKV_WAITING_TIMEOUT_S": "30",
    "PDKV_LOG_LEVEL": "warn",
}


@dataclasses.dataclass
class Shape:
    layers: int = 2
    heads: int = 4  # KV heads of the model (1 for MLA)
    head_dim: int = 8
    dtype_bytes: int = 2
    page_size: int = 4
    mla: bool = False
    capacity: int = 64  # pages per buffer per rank

    def heads_of(self, rank: int, tp: int) -> tuple[int, int]:
        if self.mla:
            return 0, 1
        if self.heads >= tp:
            n = self.heads // tp
            return rank * n, n
        return rank * self.heads // tp, 1

    def buffers(self) -> int:
        return self.layers if self.mla else 2 * self.layers


def expected_pages(shape: Shape, buffer: int, room: int, n_pages: int, first_head: int,
                   n_heads: int) -> np.ndarray:
    """[n_pages, page_size, n_heads, head_bytes] uint8 pattern of one request."""
    hb = shape.head_dim * shape.dtype_bytes
    i = np.arange(n_pages).reshape(-1, 1, 1, 1)
    t = np.arange(shape.page_size).reshape(1, -1, 1, 1)
    h = np.arange(first_head, first_head + n_heads).reshape(1, 1, -1, 1)
    x = np.arange(hb).reshape(1, 1, 1, -1)
    return ((buffer * 131 + i * 31 + t * 17 + h * 7 + x * 3 + room * 59 + 1) % 256).astype(np.uint8)


class RankMemory:
    def __init__(self, shape: Shape, tp: int, rank_in_group: int):
        self.shape = shape
        self.first_head, self.n_heads = shape.heads_of(rank_in_group, tp)
        hb = shape.head_dim * shape.dtype_bytes
        self.page_shape = (shape.page_size, self.n_heads, hb)
        self.item = shape.page_size * self.n_heads * hb
        self.bufs = [np.zeros((shape.capacity,) + self.page_shape, np.uint8)
                     for _ in range(shape.buffers())]

    def kv_args(self, pdkv, engine_rank: int, tp: int, dp: int):
        s = self.shape
        layer_buffers = [[l] for l in range(s.layers)] if s.mla else \
            [[l, s.layers + l] for l in range(s.layers)]
        return pdkv.KVArgs(
            engine_rank=engine_rank, tp_size=tp, dp_size=dp, page_size=s.page_size,
            kv_data_ptrs=[b.ctypes.data for b in self.bufs],
            kv_data_lens=[b.nbytes for b in self.bufs],
            kv_item_lens=[self.item] * len(self.bufs), layer_buffers=layer_buffers,
            kv_head_num=self.n_heads, total_kv_head_num=1 if s.mla else s.heads,
            head_dim=s.head_dim, dtype_bytes=s.dtype_bytes, page_layout="NHD", is_mla=s.mla)

    def fill(self, room: int, pages: np.ndarray) -> None:
        for b, buf in enumerate(self.bufs):
            buf[pages] = expected_pages(self.shape, b, room, len(pages), self.first_head, self.n_heads)

    def holds(self, room: int, pages: np.ndarray, first: int = 0) -> bool:
        for b, buf in enumerate(self.bufs):
            want = expected_pages(self.shape, b, room, len(pages), self.first_head, self.n_heads)
            if not np.array_equal(buf[pages[first:]], want[first:]):
                return False
        return True


def pages_for(rooms: list, room: int, rank: int, n: int, capacity: int, side: str) -> np.ndarray:
    """Shuffled pages of `room` on one rank: disjoint from the other rooms' pages."""
    k = rooms.index(room)
    if (k + 1) * n > capacity:
        raise ValueError("not enough pages for every room")
    rng = np.random.default_rng(zlib.crc32(f"{rank}/{side}".encode()))
    return rng.permutation(capacity)[k * n:(k + 1) * n].astype(np.int64)


def wait_terminal(obj, pdkv, timeout: float) -> "pdkv.KVPoll":
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = obj.poll()
        if state in (pdkv.KVPoll.Success, pdkv.KVPoll.Failed):
            return state
        time.sleep(0.002)
    return obj.poll()


def _wait_flag(flag, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not flag.value and time.monotonic() < deadline:
        time.sleep(0.005)


def _apply_env(env):
    os.environ.update(FAST_ENV)
    os.environ.update(env or {})


def prefill_main(cfg: dict, results, go, stop):
    """One prefill rank: waits for `go`, sends its rooms, reports, stays until `stop`."""
    try:
        _apply_env(cfg.get("env"))
        import pdkv
        shape = cfg["shape"]
        tp, dp, rank = cfg["tp"], cfg["dp"], cfg["engine_rank"]
        group, in_group = divmod(rank, tp)
        mem = RankMemory(shape, tp, in_group)
        mgr = pdkv.KVManager(mem.kv_args(pdkv, rank, tp, dp), "prefill", cfg["addr"],
                             layerwise_interval=cfg.get("layerwise_interval", 0),
                             wait_for_prefill_metadata=cfg.get("wait_for_metadata", False))
        results.put(("ready", "prefill", rank, os.getpid()))
        senders = {}
        for room in cfg["rooms"]:
            if room % dp != group:
                continue
            s = pdkv.KVSender(mgr, cfg["addr"], room)
            s.init(cfg["pages"], aux_index=0)
            src = pages_for(cfg["rooms"], room, rank, cfg["pages"], shape.capacity, "src")
            mem.fill(room, src)
            senders[room] = (s, src)
        _wait_flag(go, 60)
        for room, (s, src) in senders.items():
            if cfg.get("token") is not None:
                mgr.set_prefill_metadata(room, cfg["token"] + room, [room, 7])
            chunks = np.array_split(src, cfg.get("chunks", 1))
            for c in chunks:
                s.send(c)
        out = {room: int(wait_terminal(s, pdkv, cfg.get("timeout", 30))) for room, (s, _) in senders.items()}
        reasons = {}
        for room, (s, _) in senders.items():
            try:
                s.failure_exception()
            except pdkv.KVTransferError as e:
                reasons[room] = str(e)
        deadline = time.monotonic() + 5
        while mgr.active_rooms() and time.monotonic() < deadline:
            time.sleep(0.01)
        results.put(("done", "prefill", rank, {"states": out, "reasons": reasons,
                                               "active": mgr.active_rooms()}))
        _wait_flag(stop, 120)
        mgr.shutdown()
    except Exception:
        results.put(("error", "prefill", cfg.get("engine_rank"), traceback.format_exc()))


def decode_main(cfg: dict, results, go, stop):
    """One decode rank: receives its rooms, checks every byte, reports."""
    try:
        _apply_env(cfg.get("env"))
        import pdkv
        shape = cfg["shape"]
        tp, dp, rank = cfg["tp"], cfg["dp"], cfg["engine_rank"]
        group, in_group = divmod(rank, tp)
        mem = RankMemory(shape, tp, in_group)
        mgr = pdkv.KVManager(mem.kv_args(pdkv, rank, tp, dp), "decode", cfg["addr"])
        results.put(("ready", "decode", rank, os.getpid()))
        receivers = {}
        for room in cfg["rooms"]:
            if room % dp != group:  # the router sends each request to one decode DP group
                continue
            r = pdkv.KVReceiver(mgr, cfg["addr"], room)
            r.init()
            dst = pages_for(cfg["rooms"], room, rank, cfg["pages"], shape.capacity, "dst")
            r.send_metadata(dst, aux_index=0)
            receivers[room] = (r, dst)
        out, ok, meta, reasons = {}, {}, {}, {}
        for room, (r, dst) in receivers.items():
            state = wait_terminal(r, pdkv, cfg.get("timeout", 30))
            out[room] = int(state)
            ok[room] = bool(state == pdkv.KVPoll.Success and mem.holds(room, dst))
            meta[room] = r.prefill_metadata() if state == pdkv.KVPoll.Success else None
            try:
                r.failure_exception()
            except pdkv.KVTransferError as e:
                reasons[room] = str(e)
        deadline = time.monotonic() + 5
        while mgr.active_rooms() and time.monotonic() < deadline:
            time.sleep(0.01)
        results.put(("done", "decode", rank, {"states": out, "bytes_ok": ok, "meta": meta,
                                              "reasons": reasons, "active": mgr.active_rooms()}))
        _wait_flag(stop, 120)
        mgr.shutdown()
    except Exception:
        results.put(("error", "decode", cfg.get("engine_rank"), traceback.format_exc()))


class Cluster:
    """A bootstrap server in this process plus prefill and decode rank processes."""

    def __init__(self, pdkv, shape: Shape, p_tp=1, p_dp=1, d_tp=1, d_dp=1, rooms=(1,),
                 pages=8, **extra):
        self.server = pdkv.BootstrapServer("127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self.server.port}"
        self.results = CTX.Queue()
        # Flags in shared memory, not mp.Event: an Event's set() waits for every waiter to
        # wake, so it would hang forever on a waiter the test killed with SIGKILL.
        self.go, self.stop = CTX.Value("i", 0, lock=False), CTX.Value("i", 0, lock=False)
        self.procs = {}
        base = dict(shape=shape, addr=self.addr, rooms=list(rooms), pages=pages, **extra)
        for r in range(p_tp * p_dp):
            cfg = dict(base, tp=p_tp, dp=p_dp, engine_rank=r)
            self.procs[("prefill", r)] = CTX.Process(target=prefill_main,
                                                     args=(cfg, self.results, self.go, self.stop))
        for r in range(d_tp * d_dp):
            cfg = dict(base, tp=d_tp, dp=d_dp, engine_rank=r)
            self.procs[("decode", r)] = CTX.Process(target=decode_main,
                                                    args=(cfg, self.results, self.go, self.stop))
        self.ready, self.done, self.errors = {}, {}, []

    def start(self, wait_ready=True):
        for p in self.procs.values():
            p.start()
        if wait_ready:
            self.collect(lambda: len(self.ready) == len(self.procs), 60)
        return self

    def collect(self, until, timeout):
        deadline = time.monotonic() + timeout
        while not until() and time.monotonic() < deadline and not self.errors:
            try:
                kind, role, rank, payload = self.results.get(timeout=0.1)
            except Exception:
                continue
            if kind == "ready":
                self.ready[(role, rank)] = payload
            elif kind == "done":
                self.done[(role, rank)] = payload
            else:
                self.errors.append(f"{role} {rank}:\n{payload}")
        assert not self.errors, "\n".join(self.errors)

    def run(self, timeout=60, expect=None):
        self.go.value = 1
        expect = expect if expect is not None else [k for k in self.procs]
        self.collect(lambda: all(k in self.done for k in expect), timeout)
        return self.done

    def kill(self, role, rank):
        os.kill(self.procs[(role, rank)].pid, signal.SIGKILL)
        self.procs[(role, rank)].join(5)

    def close(self):
        self.stop.value = 1
        for p in self.procs.values():
            p.join(15)
            if p.is_alive():
                p.kill()
                p.join(5)
        self.server.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
