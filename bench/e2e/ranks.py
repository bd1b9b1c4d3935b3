"""Prefill and decode rank processes. The driver sends each rank one command per round
over its own queue; ranks report (role, rank, payload) on a shared result queue.

Round protocol: decode "prepare" (receivers, destination pages poisoned, metadata sent),
prefill "prepare" (senders, source pages filled, wait for the pre-allocation), prefill
"go" (send, or the simulated layerwise forward). Times are time.monotonic(), which is
CLOCK_MONOTONIC and system-wide on Linux, so they compare across processes."""
from __future__ import annotations

import os
import time
import traceback
import zlib

import numpy as np

import pattern

RANK_ENV = {"PDKV_LOG_LEVEL": "warn", "PDKV_BOOTSTRAP_TIMEOUT_S": "60",
            "PDKV_WAITING_TIMEOUT_S": "120"}


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Memory:
    """KV buffers of one rank: capacity pages each, page = (page_size, heads, head bytes)."""

    def __init__(self, preset, page_size: int, tp: int, rank: int, capacity: int):
        self.preset, self.page_size, self.capacity = preset, page_size, capacity
        self.first_head, self.n_heads = preset.heads_of(rank, tp)
        head_bytes = preset.head_dim * preset.dtype_bytes
        self.item = page_size * self.n_heads * head_bytes
        self.bufs = [np.zeros((capacity, page_size, self.n_heads, head_bytes), np.uint8)
                     for _ in range(preset.buffers())]
        self.offsets = pattern.page_offsets(page_size, self.first_head, self.n_heads, head_bytes)

    def kv_args(self, pdkv, rank: int, tp: int):
        p = self.preset
        return pdkv.KVArgs(
            engine_rank=rank, tp_size=tp, dp_size=1, page_size=self.page_size,
            kv_data_ptrs=[b.ctypes.data for b in self.bufs],
            kv_data_lens=[b.nbytes for b in self.bufs],
            kv_item_lens=[self.item] * len(self.bufs), layer_buffers=p.layer_buffers(),
            kv_head_num=self.n_heads, total_kv_head_num=p.heads, head_dim=p.head_dim,
            dtype_bytes=p.dtype_bytes, page_layout="NHD", is_mla=p.mla)


def shuffled_pages(capacity: int, seed: str) -> np.ndarray:
    """A rank's pages in shuffled order (a fragmented free list)."""
    return np.random.default_rng(zlib.crc32(seed.encode())).permutation(capacity)


def round_layout(rooms, pages_per_req, order):
    """Pages of each room (slices of the shuffled order), plus per-page room / index."""
    n = len(rooms) * pages_per_req
    pages = order[:n].astype(np.int64)
    room_of = np.repeat(np.asarray(rooms, np.int64), pages_per_req)
    idx_of = np.tile(np.arange(pages_per_req), len(rooms))
    return pages, room_of, idx_of


def wait_all(objs, pdkv, timeout, spin):
    """Poll until each is terminal; {room: (state, monotonic time it turned terminal)}."""
    out, pending = {}, dict(objs)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for room in list(pending):
            st = pending[room].poll()
            if st in (pdkv.KVPoll.Success, pdkv.KVPoll.Failed):
                out[room] = (int(st), time.monotonic())
                del pending[room]
        if pending and not spin:
            time.sleep(0.0005)
    for room, o in pending.items():
        out[room] = (int(o.poll()), time.monotonic())
    return out


def rank_main(cfg, commands, results):
    role, rank = cfg["role"], cfg["rank"]
    try:
        os.environ.update(RANK_ENV)
        os.environ.update(cfg.get("env", {}))
        import pdkv
        from presets import PRESETS
        preset = PRESETS[cfg["model"]]
        ppr = cfg["pages_per_req"]
        mem = Memory(preset, cfg["page"], cfg["tp"], rank, cfg["capacity"])
        mgr = pdkv.KVManager(mem.kv_args(pdkv, rank, cfg["tp"]), role, cfg["addr"],
                             backend=cfg["backend"],
                             layerwise_interval=cfg.get("layerwise_interval", 0))
        order = shuffled_pages(cfg["capacity"], f"{role}/{rank}")
        results.put((role, rank, "ready", os.getpid()))
        objs, layout = {}, None
        while True:
            cmd = commands.get()
            if cmd[0] == "stop":
                break
            if cmd[0] == "prepare":
                rooms = cmd[1]
                layout = round_layout(rooms, ppr, order)
                pages, room_of, idx_of = layout
                objs = {}
                if role == "decode":
                    for b, buf in enumerate(mem.bufs):  # poison: expected + 1
                        pattern.fill(buf, b, pages, room_of, idx_of, mem.offsets, delta=1)
                    for k, room in enumerate(rooms):
                        r = pdkv.KVReceiver(mgr, cfg["addr"], room)
                        r.init()
                        r.send_metadata(pages[k * ppr:(k + 1) * ppr])
                        objs[room] = r
                else:
                    if not cfg.get("layerwise_interval"):
                        for b, buf in enumerate(mem.bufs):
                            pattern.fill(buf, b, pages, room_of, idx_of, mem.offsets)
                    for room in rooms:
                        s = pdkv.KVSender(mgr, cfg["addr"], room)
                        s.init(ppr)
                        objs[room] = s
                    # Wait for every pre-allocation so the timed part is the transfer only.
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline and any(
                            s.poll() == pdkv.KVPoll.Bootstrapping for s in objs.values()):
                        time.sleep(0.001)
                results.put((role, rank, "prepared", None))
                if role == "decode":
                    states = wait_all(objs, pdkv, cfg["timeout"], cfg.get("spin", False))
                    ok = all(st == int(pdkv.KVPoll.Success) for st, _ in states.values())
                    ok = ok and all(pattern.check(buf, b, pages, room_of, idx_of, mem.offsets)
                                    for b, buf in enumerate(mem.bufs))
                    results.put((role, rank, "done", {
                        "states": {r: st for r, (st, _) in states.items()},
                        "times": {r: t for r, (_, t) in states.items()},
                        "bytes_ok": ok, "bytes": len(pages) * mem.item * len(mem.bufs),
                        "rss": rss_bytes()}))
            elif cmd[0] == "go":
                pages, room_of, idx_of = layout
                send_t, fwd_end = {}, None
                if cfg.get("layerwise_interval"):
                    mgr.reserve_layerwise_cache_steps()
                for k, (room, s) in enumerate(objs.items()):
                    s.send(pages[k * ppr:(k + 1) * ppr])
                    send_t[room] = time.monotonic()
                if cfg.get("layerwise_interval"):
                    layer_s = cfg["layer_ms"] / 1000.0
                    for layer, bufs in enumerate(preset.layer_buffers()):
                        t0 = time.monotonic()
                        for b in bufs:
                            pattern.fill(mem.bufs[b], b, pages, room_of, idx_of, mem.offsets)
                        rest = layer_s - (time.monotonic() - t0)
                        if rest > 0:
                            time.sleep(rest)  # the rest of the simulated layer's compute
                        mgr.mark_layers_ready(1)
                    fwd_end = time.monotonic()
                states = wait_all(objs, pdkv, cfg["timeout"], False)
                results.put((role, rank, "done", {
                    "states": {r: st for r, (st, _) in states.items()},
                    "send_t": send_t, "forward_end": fwd_end, "rss": rss_bytes()}))
        mgr.shutdown()
        results.put((role, rank, "stopped", None))
    except Exception:
        results.put((role, rank, "error", traceback.format_exc()))
