"""Multi-process scenarios for the pdkv KV API: a real bootstrap server, prefill and
decode ranks as separate processes over loopback (ZeroMQ control plane, TCP engine).

Each rank fills or checks its KV pages with pdkv.testing's byte pattern (it names buffer,
request page, token, model head, byte and room), so a byte in the wrong place, of the
wrong head or of the wrong room is caught. Ranks run with pdkv.testing.FAST_TIMEOUTS and
report to the test through a multiprocessing queue.
"""
from __future__ import annotations

import dataclasses
import os
import time
import traceback
from typing import Optional

import numpy as np

from pdkv import testing
from pdkv.testing import (FAST_TIMEOUTS, apply_settings, failed_rooms, heads_of, transfer_error,
                          wait_flag, wait_terminal)
from pdkv.testing.bootstrap import LoopbackBootstrap
from pdkv.testing.processes import SPAWN, PipedProcess, join_or_kill, kill, start_with_env
from pdkv.testing.reports import drain_reports


@dataclasses.dataclass
class Shape:
    layers: int = 2
    heads: int = 4  # KV heads of the model (1 for MLA)
    head_dim: int = 8
    dtype_bytes: int = 2
    page_size: int = 4
    mla: bool = False
    capacity: int = 64  # pages per buffer per rank
    # Speculative decoding: a draft model's KV layers after the target's, with their own
    # head count and head size (0 = the target's).
    draft_layers: int = 0
    draft_heads: int = 0
    draft_head_dim: int = 0

    def heads_of(self, rank: int, tp: int, draft: bool = False) -> tuple[int, int]:
        heads = (self.draft_heads or self.heads) if draft else self.heads
        return heads_of(rank, tp, heads, self.mla)

    def buffers(self) -> int:
        kv_layers = self.layers + self.draft_layers
        return kv_layers if self.mla else 2 * kv_layers

    def is_draft_buffer(self, b: int) -> bool:
        """Buffers: target K (or latent) of every layer, target V, then the draft's K, V."""
        per_side = 1 if self.mla else 2
        return b >= per_side * self.layers

    def head_bytes(self, b: int) -> int:
        dim = (self.draft_head_dim or self.head_dim) if self.is_draft_buffer(b) else self.head_dim
        return dim * self.dtype_bytes

    def layer_buffers(self) -> list:
        L, D = self.layers, self.draft_layers
        if self.mla:
            return [[l] for l in range(L + D)]
        return [[l, L + l] for l in range(L)] + [[2 * L + d, 2 * L + D + d] for d in range(D)]


AUX_ROWS, AUX_ROW_BYTES = 16, 40
STATE_SLOTS, STATE_SLOT_BYTES = 16, 96


def aux_pattern(room: int) -> np.ndarray:
    return ((np.arange(AUX_ROW_BYTES) * 5 + room * 13 + 3) % 256).astype(np.uint8)


def state_pattern(room: int, buffer: int) -> np.ndarray:
    return ((np.arange(STATE_SLOT_BYTES) * 11 + room * 29 + buffer * 71 + 5) % 256).astype(np.uint8)


def room_slots(rooms: list, room: int, n_dst: int):
    """(prefill aux row, prefill state slot, decode aux row, decode state slots) of a room:
    different on each side, so a copy to the wrong row or slot is caught."""
    k = rooms.index(room)
    return k, k, AUX_ROWS - 1 - k, [STATE_SLOTS - 1 - k * n_dst - j for j in range(n_dst)]


class RankMemory(testing.RankMemory):
    """A rank's buffers for a Shape: KV (a draft buffer with its own heads and head
    size), plus one aux buffer (a row per request slot) and two state buffers (a slot
    each), allocated always, registered only when the scenario uses them."""

    def __init__(self, shape: Shape, tp: int, rank_in_group: int):
        self.shape = shape
        self.first_head, self.n_heads = shape.heads_of(rank_in_group, tp)
        geometry = [shape.heads_of(rank_in_group, tp, shape.is_draft_buffer(b))
                    + (shape.head_bytes(b),) for b in range(shape.buffers())]
        super().__init__(geometry, shape.capacity, shape.page_size)
        self.aux = np.zeros((AUX_ROWS, AUX_ROW_BYTES), np.uint8)
        self.state = [np.zeros((STATE_SLOTS, STATE_SLOT_BYTES), np.uint8) for _ in range(2)]

    def kv_args(self, pdkv, engine_rank: int, tp: int, dp: int, aux=False, state=False,
                layout=None):
        """`layout`: None = this shape's; "HND" = another page_layout; "swapped" = [v, k]
        layer_buffers order (a mismatch only the prefill's registration check sees)."""
        s = self.shape
        extra = {}
        layer_buffers = s.layer_buffers()
        if s.draft_layers:
            extra.update(target_layer_num=s.layers, draft_total_kv_head_num=s.draft_heads,
                         draft_head_dim=s.draft_head_dim,
                         draft_kv_head_num=self.geometry[-1][1] if s.draft_heads else 0)
        if layout == "swapped":
            layer_buffers = [list(reversed(b)) for b in layer_buffers]
        return testing.kv_args_from_buffers(
            self.bufs, engine_rank=engine_rank, tp_size=tp, dp_size=dp, page_size=s.page_size,
            item_lens=self.item_lens, layer_buffers=layer_buffers,
            kv_head_num=self.n_heads, total_kv_head_num=1 if s.mla else s.heads,
            head_dim=s.head_dim, dtype_bytes=s.dtype_bytes,
            page_layout="HND" if layout == "HND" else "NHD", is_mla=s.mla,
            aux=[self.aux] if aux else (), state=self.state if state else (), **extra)

    def layer_buffers_of(self, layer: int) -> list:
        return self.shape.layer_buffers()[layer]

    def fill_layer(self, room: int, pages: np.ndarray, layer: int) -> None:
        self.fill(room, pages, self.layer_buffers_of(layer))

    def layer_holds(self, room: int, pages: np.ndarray, layer: int) -> bool:
        return self.holds(room, pages, buffers=self.layer_buffers_of(layer))

    def fill_extras(self, room: int, aux_row: int, slot: int) -> None:
        self.aux[aux_row] = aux_pattern(room)
        for b, buf in enumerate(self.state):
            buf[slot] = state_pattern(room, b)

    def holds_extras(self, room: int, aux_row, slots) -> bool:
        if aux_row is not None and not np.array_equal(self.aux[aux_row], aux_pattern(room)):
            return False
        return all(np.array_equal(buf[slot], state_pattern(room, b))
                   for b, buf in enumerate(self.state) for slot in slots)


class DeviceKV:
    """A rank's KV buffers in fake CUDA memory (fake_cuda_array.py), mirroring
    RankMemory.bufs: the prefill writes its pages on the host and uploads them; the decode
    downloads what pdkv landed before checking. Aux and state stay on the host, beside."""

    def __init__(self, mem: RankMemory, device: int):
        from fake_cuda_array import FakeCudaArray
        self.mem = mem
        self.arrays = [FakeCudaArray(b.nbytes, device) for b in mem.bufs]
        for a, b in zip(self.arrays, mem.bufs):
            a.upload(b)  # zeros: whatever the decode finds was written by pdkv

    def attach(self, args):
        """`args` with the device arrays as its KV buffers (their lengths from DLPack)."""
        args.kv_data_ptrs, args.kv_data_lens = list(self.arrays), []
        return args

    def upload(self) -> None:
        for a, b in zip(self.arrays, self.mem.bufs):
            a.upload(b)

    def upload_on(self, stream) -> None:
        """Queues the upload on `stream` (a FakeCudaStream): it lands when the stream
        gets there, as a forward pass's writes do."""
        for a, b in zip(self.arrays, self.mem.bufs):
            stream.upload(a, b)

    def download(self) -> None:
        for a, b in zip(self.arrays, self.mem.bufs):
            b.reshape(-1)[:] = np.frombuffer(a.download(), np.uint8)


def device_kv(cfg: dict, mem: RankMemory, rank: int):
    """DeviceKV on fake device rank % 2 when the scenario asks for device KV, else None."""
    return DeviceKV(mem, rank % 2) if cfg.get("device_kv") else None


def pages_for(rooms: list, room: int, rank: int, n: int, capacity: int, side: str) -> np.ndarray:
    """Shuffled pages of `room` on one rank: disjoint from the other rooms' pages."""
    k = rooms.index(room)
    if (k + 1) * n > capacity:
        raise ValueError("not enough pages for every room")
    order = testing.shuffled_pages(capacity, f"{rank}/{side}")
    return order[k * n:(k + 1) * n].astype(np.int64)


def apply_env(env, role_env=None, rank_env=None):
    """FAST_TIMEOUTS, then the scenario's `env`, then `role_env`: one side only (e.g. a
    checksum only the decode checks), then `rank_env`: one rank of that side."""
    apply_settings(FAST_TIMEOUTS, env, role_env, rank_env)


def wait_inactive(mgr, timeout: float = 5.0) -> int:
    """Waits for the manager's tables to empty; returns the rooms left (0 if they did)."""
    testing.wait_until(lambda: not mgr.active_rooms(), timeout, 0.01)
    return mgr.active_rooms()


def scrape(mgr) -> Optional[str]:
    """GET /metrics of the rank's own endpoint (PDKV_METRICS_PORT), None if it has none."""
    if mgr.metrics_port < 0:
        return None
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{mgr.metrics_port}/metrics", timeout=5) as r:
        return r.read().decode()


def report_and_stay(results, role: str, rank: int, report: dict, mgr, stop) -> None:
    """Sends the rank's report, then keeps its manager up until the test sets `stop`: a
    peer may still be finishing its side of a room."""
    results.put(("done", role, rank, report))
    wait_flag(stop, 120)
    mgr.shutdown()


def report_crash(results, role: str, cfg: dict) -> None:
    """From a rank's except block: its traceback goes to the test, which fails with it
    rather than waiting for a report that never comes."""
    results.put(("error", role, cfg.get("engine_rank"), traceback.format_exc()))


def prefill_main(cfg: dict, results, go, stop):
    """One prefill rank: waits for `go`, sends its rooms, reports, stays until `stop`."""
    try:
        apply_env(cfg.get("env"), cfg.get("prefill_env"),
                  cfg.get("prefill_env_by_rank", {}).get(cfg["engine_rank"]))
        import pdkv
        shape = cfg["shape"]
        tp, dp, rank = cfg["tp"], cfg["dp"], cfg["engine_rank"]
        group, in_group = divmod(rank, tp)
        mem = RankMemory(shape, tp, in_group)
        aux, n_state = cfg.get("aux", False), cfg.get("state_slots", 0)
        forward_ms = cfg.get("forward_ms")  # simulated layerwise forward, ms per layer
        dev = device_kv(cfg, mem, rank)
        args = mem.kv_args(pdkv, rank, tp, dp, aux, n_state > 0)
        mgr = pdkv.KVManager(dev.attach(args) if dev else args, "prefill",
                             cfg["addr"],
                             layerwise_interval=cfg.get("layerwise_interval", 0),
                             wait_for_prefill_metadata=cfg.get("wait_for_metadata", False))
        results.put(("ready", "prefill", rank, os.getpid()))
        senders = {}
        for room in cfg["rooms"]:
            if room % dp != group:
                continue
            s = pdkv.KVSender(mgr, cfg["addr"], room)
            aux_row, slot, _, _ = room_slots(cfg["rooms"], room, max(n_state, 1))
            s.init(cfg["pages"], aux_index=aux_row if aux else None)
            src = pages_for(cfg["rooms"], room, rank, cfg["pages"], shape.capacity, "src")
            if forward_ms is None:  # layerwise: the simulated forward writes them later
                mem.fill(room, src)
            mem.fill_extras(room, aux_row, slot)
            senders[room] = (s, src, slot)
        # "named" / "unnamed": the KV is written by a (fake) compute stream after
        # stream_delay_ms of queued work (150 by default), and sent with that stream named,
        # or without (the caller's bug).
        stream_forward, stream = cfg.get("stream_forward"), None
        if dev and not stream_forward:
            dev.upload()
        wait_flag(go, 60)
        if stream_forward:
            from fake_cuda_array import FakeCudaStream
            stream = FakeCudaStream(rank % 2)
            stream.sleep(cfg.get("stream_delay_ms", 150))
            dev.upload_on(stream)
        named = stream if stream_forward == "named" else None
        token, token_after = cfg.get("token"), cfg.get("token_after", False)
        if forward_ms is not None:
            mgr.reserve_layerwise_cache_steps()
        for room, (s, src, slot) in senders.items():
            if token is not None and not token_after:
                mgr.set_prefill_metadata(room, token + room, [room, 7])
            chunks = np.array_split(src, cfg.get("chunks", 1))
            for i, c in enumerate(chunks):
                last = i == len(chunks) - 1
                s.send(c, state_indices=[slot] if last and n_state else None, stream=named)
            if cfg.get("abort") == "prefill_after_send":
                s.abort()
        if forward_ms is not None:
            kv_layers = shape.layers + shape.draft_layers
            for layer in range(kv_layers if cfg.get("abort") != "decode_mid_forward" else 1):
                for room, (s, src, _) in senders.items():
                    mem.fill_layer(room, src, layer)
                if dev:
                    dev.upload()
                time.sleep(forward_ms / 1000.0)
                mgr.mark_layers_ready(1)
        if token is not None and token_after:
            time.sleep(0.3)  # the KV is in flight or landed; the first token comes later
            for room in senders:
                mgr.set_prefill_metadata(room, token + room, [room, 7])
        out = {room: int(wait_terminal(s, cfg.get("timeout", 30)))
               for room, (s, _, _) in senders.items()}
        reasons, causes = failed_rooms({room: s for room, (s, _, _) in senders.items()})
        wait_inactive(mgr)
        report_and_stay(results, "prefill", rank,
                        {"states": out, "reasons": reasons, "causes": causes,
                         "active": mgr.active_rooms(), "metrics": mgr.metrics(),
                         "metrics_text": scrape(mgr), "health": pdkv.device_health(),
                         "rank_metrics_text": mgr.metrics_text()}, mgr, stop)
    except Exception:
        report_crash(results, "prefill", cfg)


def decode_main(cfg: dict, results, go, stop):
    """One decode rank: receives its rooms, checks every byte, reports."""
    try:
        apply_env(cfg.get("env"), cfg.get("decode_env"))
        import pdkv
        shape = cfg.get("decode_shape") or cfg["shape"]  # a decode of another layout
        tp, dp, rank = cfg["tp"], cfg["dp"], cfg["engine_rank"]
        group, in_group = divmod(rank, tp)
        mem = RankMemory(shape, tp, in_group)
        aux, n_state = cfg.get("aux", False), cfg.get("state_slots", 0)
        dev = device_kv(cfg, mem, rank)
        args = mem.kv_args(pdkv, rank, tp, dp, aux, n_state > 0, layout=cfg.get("decode_layout"))
        mgr = pdkv.KVManager(dev.attach(args) if dev else args, "decode", cfg["addr"])
        results.put(("ready", "decode", rank, os.getpid()))
        receivers, opened, elapsed = {}, {}, {}
        for room in cfg["rooms"]:
            if room % dp != group:  # the router sends each request to one decode DP group
                continue
            opened[room] = time.monotonic()
            r = pdkv.KVReceiver(mgr, cfg["addr"], room)
            r.init()
            dst = pages_for(cfg["rooms"], room, rank, cfg["pages"], shape.capacity, "dst")
            if cfg.get("bad_dst_page"):  # a page past this rank's registered buffers
                dst = dst.copy()
                dst[-1] = shape.capacity + 100
            _, _, aux_row, slots = room_slots(cfg["rooms"], room, max(n_state, 1))
            r.send_metadata(dst, aux_index=aux_row if aux else None,
                            state_indices=slots if n_state else None)
            receivers[room] = (r, dst, aux_row if aux else None, slots if n_state else [])
            if cfg.get("abort") == "decode_before_transfer":
                r.abort()
        if cfg.get("abort") == "decode_mid_forward":
            # Abort once layer 0 has landed: the transfer is under way, the rest never comes.
            deadline = time.monotonic() + 20
            for room, (r, dst, _, _) in receivers.items():
                testing.wait_until(lambda: mem.layer_holds(room, dst, 0),
                                   deadline - time.monotonic(), 0.002)
                r.abort()
        out, ok, meta = {}, {}, {}
        for room, (r, dst, aux_row, slots) in receivers.items():
            state = wait_terminal(r, cfg.get("timeout", 30))
            elapsed[room] = time.monotonic() - opened[room]  # from KVReceiver construction
            out[room] = int(state)
            if dev:
                dev.download()
            ok[room] = bool(state == pdkv.KVPoll.Success and mem.holds(room, dst)
                            and mem.holds_extras(room, aux_row, slots))
            meta[room] = r.prefill_metadata() if state == pdkv.KVPoll.Success else None
        reasons, causes = failed_rooms({room: r for room, (r, *_rest) in receivers.items()})
        wait_inactive(mgr)
        report_and_stay(results, "decode", rank,
                        {"states": out, "bytes_ok": ok, "meta": meta, "reasons": reasons,
                         "causes": causes, "elapsed": elapsed, "active": mgr.active_rooms(),
                         "metrics": mgr.metrics(), "metrics_text": scrape(mgr),
                         "health": pdkv.device_health(),
                         "rank_metrics_text": mgr.metrics_text()}, mgr, stop)
    except Exception:
        report_crash(results, "decode", cfg)


def serial_decode_main(cfg: dict, conn):
    """One decode rank (TP 1) that opens a room per request on `conn` ({"room", "rooms",
    "timeout"}), waits for it to end and answers with its outcome; None ends it. For
    scenarios where one live decode meets prefill ranks that come and go."""
    try:
        apply_env(cfg.get("env"))
        import pdkv
        shape = cfg["shape"]
        mem = RankMemory(shape, 1, 0)
        mgr = pdkv.KVManager(mem.kv_args(pdkv, 0, 1, 1), "decode", cfg["addr"])
        conn.send(("ready", os.getpid()))
        while True:
            ask = conn.recv()
            if ask is None:
                break
            room = ask["room"]
            t0 = time.monotonic()
            r = pdkv.KVReceiver(mgr, cfg["addr"], room)
            r.init()
            dst = pages_for(ask["rooms"], room, 0, cfg["pages"], shape.capacity, "dst")
            r.send_metadata(dst)
            state = wait_terminal(r, ask.get("timeout", 30))
            out = {"state": int(state), "elapsed": time.monotonic() - t0,
                   "bytes_ok": bool(state == pdkv.KVPoll.Success and mem.holds(room, dst)),
                   "reason": None, "cause": None}
            e = transfer_error(r)
            if e is not None:
                out["reason"], out["cause"] = str(e), e.cause
            conn.send(("room", out))
        mgr.shutdown()
        conn.send(("bye", None))
    except Exception:
        conn.send(("error", traceback.format_exc()))


class SerialDecode(PipedProcess):
    """A serial_decode_main process; `room()` runs one room on it."""

    def __init__(self, shape: Shape, addr: str, env=None, pages=8):
        cfg = dict(shape=shape, addr=addr, env=env, pages=pages)
        super().__init__("serial decode", serial_decode_main, (cfg,))
        self.expect("ready", 60)

    def room(self, room: int, rooms, timeout: float = 30) -> dict:
        """{"state", "elapsed" (s from KVReceiver construction), "bytes_ok", "reason",
        "cause"} of `room` (`rooms`: every room of the scenario, for disjoint pages)."""
        self.conn.send({"room": room, "rooms": list(rooms), "timeout": timeout})
        return self.expect("room", timeout + 30)


class Cluster:
    """A bootstrap server in this process (unless `addr` is given) plus prefill and decode
    rank processes."""

    def __init__(self, pdkv, shape: Shape, p_tp=1, p_dp=1, d_tp=1, d_dp=1, rooms=(1,),
                 pages=8, addr=None, spawn_env=None, **extra):
        # With `addr`, the ranks find each other elsewhere (PDKV_REGISTRY=etcd in `env`);
        # `addr` then only names the prefill instance.
        # `spawn_env`: {"prefill" or "decode": {VAR: value}}, in that role's environment
        # from its first instruction (LD_PRELOAD must be there when the process starts;
        # `env` is applied only once the rank runs).
        self.spawn_env = spawn_env or {}
        self.server = None if addr else LoopbackBootstrap(pdkv)
        self.addr = addr or self.server.addr
        self.results = SPAWN.Queue()
        # Flags in shared memory, not mp.Event: an Event's set() waits for every waiter to
        # wake, so it would hang forever on a waiter the test killed with SIGKILL.
        self.go, self.stop = SPAWN.Value("i", 0, lock=False), SPAWN.Value("i", 0, lock=False)
        self.procs = {}
        base = dict(shape=shape, addr=self.addr, rooms=list(rooms), pages=pages, **extra)
        for r in range(p_tp * p_dp):
            cfg = dict(base, tp=p_tp, dp=p_dp, engine_rank=r)
            self.procs[("prefill", r)] = SPAWN.Process(target=prefill_main,
                                                       args=(cfg, self.results, self.go, self.stop))
        for r in range(d_tp * d_dp):
            cfg = dict(base, tp=d_tp, dp=d_dp, engine_rank=r)
            self.procs[("decode", r)] = SPAWN.Process(target=decode_main,
                                                      args=(cfg, self.results, self.go, self.stop))
        self.ready, self.done, self.errors = {}, {}, []

    def start(self, wait_ready=True):
        for (role, _), p in self.procs.items():
            start_with_env(p, self.spawn_env.get(role))
        if wait_ready:
            self.collect(lambda: len(self.ready) == len(self.procs), 60)
        return self

    def collect(self, until, timeout):
        drain_reports(self.results, lambda: until() or self.errors,
                      time.monotonic() + timeout, self._take)
        assert not self.errors, "\n".join(self.errors)

    def _take(self, msg):
        kind, role, rank, payload = msg
        if kind == "ready":
            self.ready[(role, rank)] = payload
        elif kind == "done":
            self.done[(role, rank)] = payload
        else:
            self.errors.append(f"{role} {rank}:\n{payload}")

    def run(self, timeout=60, expect=None):
        self.go.value = 1
        expect = expect if expect is not None else [k for k in self.procs]
        self.collect(lambda: all(k in self.done for k in expect), timeout)
        return self.done

    def kill(self, role, rank):
        kill(self.procs[(role, rank)])

    def close(self):
        self.stop.value = 1
        join_or_kill(self.procs.values(), time.monotonic() + 15)
        if self.server:
            self.server.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
