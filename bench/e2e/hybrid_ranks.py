"""Rank processes of the hybrid scale case (P12): each rank holds two KVManagers, the
hybrid arm (a preset's groups, hybrid_presets.py) and the plain arm (llama-style KV of about
the same bytes per room), each registered at its own bootstrap server, so both arms run in
the same processes on the same cores and the driver alternates their rounds.

The round protocol is ranks.py's ("prepare" on the decodes, "prepare" on the prefills,
"go"), each command naming its arm, and the payloads are the same, so report.summarize
reads them. Every group's pages and slots carry the shared byte pattern (pdkv.testing's
pattern, one buffer index per KV or state buffer), the decode poisons its destinations
before each round and checks every byte of every group and state slot of every room that
reached Success."""
from __future__ import annotations

import faulthandler
import os
import signal
import time
import traceback

import numpy as np

from pdkv.testing import apply_settings, kv_args_from_buffers, pattern, shuffled_pages

import polling
import sysutil
from hybrid_presets import Kind
from ranks import PREALLOC_WAIT_S, RANK_ENV, outcomes

ARMS = ("hybrid", "plain")


class GroupMemory:
    """One group's buffers on one rank: `capacity` items (pages or slots) each, an item being
    (tokens per item, heads here, head bytes), and a shuffled free order of its own pool."""

    def __init__(self, group, rank: int, tp: int, page: int, capacity: int, first_buffer: int,
                 seed: str):
        self.group, self.first_buffer = group, first_buffer
        first_head, n_heads = group.heads_of(rank, tp)
        per_item = 1 if group.kind == Kind.SLOTS else page
        self.bufs = [np.zeros((capacity, per_item, n_heads, group.head_bytes), np.uint8)
                     for _ in range(group.buffers)]
        self.item = int(self.bufs[0][0].nbytes)
        self.offsets = pattern.page_offsets(per_item, first_head, n_heads, group.head_bytes)
        self.order = shuffled_pages(capacity, seed).astype(np.int64)
        self.layout = None

    def lay_out(self, rooms, moved: int, first_page: int) -> None:
        """Items of each room (slices of the shuffled order) with their room and request
        page (the pattern's page term: the window's pages keep their place in the prompt)."""
        self.layout = (self.order[:len(rooms) * moved],
                       np.repeat(np.asarray(rooms, np.int64), moved),
                       np.tile(np.arange(first_page, first_page + moved), len(rooms)))

    def fill(self, delta: int = 0) -> None:
        items, room_of, idx_of = self.layout
        for b, buf in enumerate(self.bufs):
            pattern.fill(buf, self.first_buffer + b, items, room_of, idx_of, self.offsets,
                         delta=delta)

    def holds(self, mask) -> bool:
        items, room_of, idx_of = self.layout
        return all(pattern.check(buf, self.first_buffer + b, items[mask], room_of[mask],
                                 idx_of[mask], self.offsets) for b, buf in enumerate(self.bufs))


class Arm:
    """One manager over one preset's groups (the hybrid preset, or the plain one)."""

    def __init__(self, pdkv, preset, cfg, addr: str, name: str):
        self.preset, self.addr = preset, addr
        role, rank, tp, page = cfg["role"], cfg["rank"], cfg["tp"], cfg["page"]
        tokens, conc = cfg["tokens"], cfg["concurrency"]
        self.ppr = tokens // page
        self.groups, first, state_group = [], 0, 0
        self.moved, self.first_page, self.state_ids = [], [], []
        for gi, g in enumerate(preset.groups):  # KV groups first: KVArgs lists them first
            moved = g.pages_moved(tokens, page)
            self.moved.append(moved)
            self.first_page.append(0 if g.kind == Kind.SLOTS else self.ppr - moved)
            self.groups.append(GroupMemory(g, rank, tp, page, conc * moved, first,
                                           f"{name}/{g.name}/{role}/{rank}"))
            first += g.buffers
            self.state_ids.append(-1 if g.kind == Kind.CHUNKED else state_group)
            state_group += g.kind != Kind.CHUNKED
        self.n_state_groups = state_group
        self.mgr = pdkv.KVManager(self.kv_args(rank, tp, page), role, addr,
                                  backend=cfg["backend"])
        self.objs, self.rooms = {}, []

    def kv_args(self, rank: int, tp: int, page: int):
        kv = [m for m in self.groups if m.group.is_kv]
        state = [m for m in self.groups if not m.group.is_kv]
        bufs, layers, layer_groups = [], [], []
        for m in kv:
            base, half = len(bufs), m.group.buffers // 2
            bufs += m.bufs
            sid = self.state_ids[self.groups.index(m)]
            new = ([[base + b] for b in range(m.group.buffers)] if m.group.mla else
                   [[base + b, base + half + b] for b in range(half)])
            layers += new
            layer_groups += [sid] * len(new)
        g = kv[0].group
        _, n_heads = g.heads_of(rank, tp)
        fields = dict(page_layout="NHD", is_mla=g.mla)
        if any(x >= 0 for x in layer_groups):
            fields["kv_layer_groups"] = layer_groups
        if state:
            fields["state_buffer_groups"] = [self.state_ids[self.groups.index(m)]
                                             for m in state for _ in m.bufs]
        return kv_args_from_buffers(
            bufs, engine_rank=rank, tp_size=tp, dp_size=1, page_size=page,
            layer_buffers=layers, kv_head_num=n_heads, total_kv_head_num=g.heads,
            head_dim=g.head_bytes // 2, dtype_bytes=2,
            state=[b for m in state for b in m.bufs], **fields)

    def lay_out(self, rooms) -> None:
        self.rooms = list(rooms)
        for m, moved, first in zip(self.groups, self.moved, self.first_page):
            m.lay_out(rooms, moved, first)

    def indices(self, k: int):
        """(chunked pages, one list per state group or None) of the round's k-th room."""
        pages, lists = None, [None] * self.n_state_groups
        for m, moved, sid in zip(self.groups, self.moved, self.state_ids):
            mine = m.layout[0][k * moved:(k + 1) * moved]
            if sid < 0:
                pages = mine
            else:
                lists[sid] = mine
        return pages, (lists if self.n_state_groups else None)

    def room_bytes(self) -> int:
        """Bytes one room writes on this rank, every group."""
        return sum(m.item * moved * len(m.bufs) for m, moved in zip(self.groups, self.moved))

    def bad_rooms(self, ok_rooms) -> list:
        """Rooms of `ok_rooms` with any wrong byte in any group (per room only on a miss)."""
        ok = np.fromiter(ok_rooms, np.int64)
        masks = [np.isin(m.layout[1], ok) for m in self.groups]
        if all(m.holds(mask) for m, mask in zip(self.groups, masks)):
            return []
        return [room for room in sorted(ok_rooms)
                if not all(m.holds(m.layout[1] == room) for m in self.groups)]


class HybridRank:
    def __init__(self, cfg, pdkv, results):
        from hybrid_presets import HYBRID, plain_preset
        self.cfg, self.pdkv, self.results = cfg, pdkv, results
        self.role, self.rank = cfg["role"], cfg["rank"]
        hybrid = HYBRID[cfg["model"]].scaled(cfg["tokens"])
        plain = plain_preset(hybrid, cfg["tokens"], cfg["page"], cfg["decode_tp"],
                             cfg.get("plain_heads") == "model")
        self.arms = {"hybrid": Arm(pdkv, hybrid, cfg, cfg["addr"], "hybrid"),
                     "plain": Arm(pdkv, plain, cfg, cfg["plain_addr"], "plain")}

    def put(self, kind, payload=None):
        self.results.put((self.role, self.rank, kind, payload))

    def prepare(self, rooms, arm_name):
        arm = self.arms[arm_name]
        arm.lay_out(rooms)
        if self.role == "decode":
            self._prepare_decode(arm)
        else:
            self._prepare_prefill(arm)

    def _prepare_decode(self, arm):
        pdkv, cfg = self.pdkv, self.cfg
        for m in arm.groups:
            m.fill(delta=1)  # poison: every byte wrong until the room writes it
        arm.objs = {}
        for k, room in enumerate(arm.rooms):
            pages, lists = arm.indices(k)
            r = pdkv.KVReceiver(arm.mgr, arm.addr, room)
            r.init()
            r.send_metadata(pages, state_indices=lists)
            arm.objs[room] = r
        self.put("prepared")
        states = polling.wait_all(arm.objs, cfg["timeout"], cfg.get("decode_poll", "engine"),
                                  cfg.get("poll_sleep_us", 50.0))
        ok_rooms = {r for r, (st, _) in states.items() if st == polling.SUCCESS}
        bad = arm.bad_rooms(ok_rooms) if ok_rooms else []
        self.put("done", {
            "states": {r: st for r, (st, _) in states.items()},
            "times": {r: t for r, (_, t) in states.items()},
            "reasons": outcomes(arm.objs, states, pdkv, cfg["timeout"]),
            "bad_rooms": bad, "room_bytes": arm.room_bytes(),
            "bytes_ok": len(ok_rooms) == len(arm.rooms) and not bad,
            "bytes": arm.room_bytes() * len(arm.rooms), "rss": sysutil.settled_rss_bytes()})

    def _prepare_prefill(self, arm):
        pdkv = self.pdkv
        for m in arm.groups:
            m.fill()
        arm.objs = {}
        for room in arm.rooms:
            s = pdkv.KVSender(arm.mgr, arm.addr, room)
            s.init(arm.ppr)
            arm.objs[room] = s
        # Wait for every pre-allocation so the timed part is the transfer only.
        deadline = time.monotonic() + min(PREALLOC_WAIT_S, self.cfg["timeout"])
        pacer = polling.Pacer("engine")
        while time.monotonic() < deadline and any(
                s.poll() == pdkv.KVPoll.Bootstrapping for s in arm.objs.values()):
            pacer.wait(deadline)
        self.put("prepared")

    def go(self, arm_name):
        """Prefill: send every room (its chunked pages and every state group's list)."""
        arm, cfg = self.arms[arm_name], self.cfg
        send_t = {}
        for k, (room, s) in enumerate(arm.objs.items()):
            pages, lists = arm.indices(k)
            send_t[room] = time.monotonic()  # before send(): see ranks.Rank.go
            s.send(pages, state_indices=lists)
        states = polling.wait_all(arm.objs, cfg["timeout"], "engine")
        self.put("done", {
            "states": {r: st for r, (st, _) in states.items()},
            "reasons": outcomes(arm.objs, states, self.pdkv, cfg["timeout"]),
            "send_t": send_t, "forward_end": None, "rss": sysutil.settled_rss_bytes()})

    def shutdown(self):
        for arm in self.arms.values():
            arm.mgr.shutdown()


def rank_main(cfg, commands, results):
    role, rank = cfg["role"], cfg["rank"]
    sysutil.die_with_parent()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where a silent rank is stuck
    try:
        apply_settings(RANK_ENV, cfg.get("env", {}))
        import pdkv
        r = HybridRank(cfg, pdkv, results)
        r.put("ready", os.getpid())
        while True:
            cmd = commands.get()
            if cmd[0] == "stop":
                break
            if cmd[0] == "prepare":
                r.prepare(cmd[1], cmd[2])
            elif cmd[0] == "go":
                r.go(cmd[1])
        r.shutdown()
        results.put((role, rank, "stopped", None))
    except Exception:
        results.put((role, rank, "error", traceback.format_exc()))
