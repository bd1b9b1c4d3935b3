"""Rank processes for test_kv_state_groups.py: a hybrid model's room across real
processes (bootstrap server, ZeroMQ control plane, TCP engine).

Each rank holds four KV layers (K and V of each in one region: side by side per page when
`strided`, FlashInfer's layout, else K pages then V pages): layers 0 and 1 take the room's
chunked pages, layers 2 and 3 take state group 1's list (sliding-window pages); and two
state buffers in group 0 (mamba-like slots: one sharded between TP sizes, one
replicated; with `strided` both are pieces of one slot page, striding by it). The
prefill's bytes come from a seed, so a decode rank computes exactly what
each of its bytes must be, written or not.
"""
from __future__ import annotations

import os
import traceback

import numpy as np

from pdkv.testing import FAST_TIMEOUTS, apply_settings, wait_flag, wait_terminal

HEADS, HEAD_DIM, DTYPE_BYTES, TOKENS, PAGES, SLOTS = 4, 8, 2, 2, 12, 6
HEAD_BYTES = HEAD_DIM * DTYPE_BYTES
SHARDED_SLOT, REPLICATED_SLOT = 48, 32  # state slot bytes on TP 1
STATE_GAP = 8  # strided: bytes after a slot page's two pieces, which nothing may write
UNWRITTEN = 0xEE

# The room: chunked pages, then each group's lists (group 0 broadcasts one slot; group 1
# drops the entries either side marks -1).
SRC, DST = [1, 4, 6, 10, 11], [2, 8, 9, 5, 7]
GROUP_SRC = [[2], [-1, 7, 2, 9]]
GROUP_DST = [[0, 4], [5, 0, -1, 3]]


class HybridRank:
    def __init__(self, tp: int, rank: int, strided: bool, fill: int):
        self.tp, self.rank, self.strided = tp, rank, strided
        self.heads = HEADS // tp
        self.item = self.heads * TOKENS * HEAD_BYTES
        self.regions = [np.full(2 * self.item * PAGES, fill, np.uint8) for _ in range(4)]
        self.state_items = (SHARDED_SLOT // tp, REPLICATED_SLOT)
        if strided:  # both state buffers are pieces of one slot page, with a gap after
            self.state_page = sum(self.state_items) + STATE_GAP
            self.state = [np.full(self.state_page * SLOTS, fill, np.uint8)]
        else:
            self.state = [np.full(item * SLOTS, fill, np.uint8) for item in self.state_items]

    def slot(self, buf: int, q: int) -> np.ndarray:
        """Slot q of state buffer `buf`."""
        item = self.state_items[buf]
        if self.strided:
            at = q * self.state_page + sum(self.state_items[:buf])
            return self.state[0][at:at + item]
        return self.state[buf][q * item:(q + 1) * item]

    def state_fields(self) -> dict:
        if not self.strided:
            return dict(state_data_ptrs=[s.ctypes.data for s in self.state],
                        state_data_lens=[s.size for s in self.state],
                        state_item_lens=list(self.state_items))
        base, page = self.state[0].ctypes.data, self.state_page
        return dict(state_data_ptrs=[base, base + self.state_items[0]],
                    state_data_lens=[(SLOTS - 1) * page + i for i in self.state_items],
                    state_item_lens=list(self.state_items), state_page_strides=[page, page])

    def page_offset(self, kv: int, page: int) -> int:
        if self.strided:
            return page * 2 * self.item + kv * self.item
        return kv * PAGES * self.item + page * self.item

    def page(self, layer: int, kv: int, page: int) -> np.ndarray:
        at = self.page_offset(kv, page)
        return self.regions[layer][at:at + self.item]

    def kv_args(self, pdkv, **overrides):
        ptrs, lens, items, strides, layers = [], [], [], [], []
        for layer, region in enumerate(self.regions):
            for kv in range(2):
                ptrs.append(region.ctypes.data + self.page_offset(kv, 0))
                lens.append(2 * self.item * PAGES - self.item if self.strided
                            else self.item * PAGES)
                items.append(self.item)
                strides.append(2 * self.item if self.strided else 0)
            layers.append([2 * layer, 2 * layer + 1])
        fields = dict(
            engine_rank=self.rank, tp_size=self.tp, page_size=TOKENS,
            kv_data_ptrs=ptrs, kv_data_lens=lens, kv_item_lens=items, layer_buffers=layers,
            kv_head_num=self.heads, total_kv_head_num=HEADS, head_dim=HEAD_DIM,
            dtype_bytes=DTYPE_BYTES, page_layout="NHD", memory_kind="host",
            state_buffer_groups=[0, 0], kv_layer_groups=[-1, -1, 1, 1],
            kv_page_strides=strides, **self.state_fields())
        fields.update(overrides)
        return pdkv.KVArgs(**fields)


def prefill_rank(strided: bool, seed: int) -> HybridRank:
    r = HybridRank(1, 0, strided, 0)
    rng = np.random.default_rng(seed)
    for region in r.regions:
        region[:] = rng.integers(0, 256, region.size, dtype=np.uint8)
    for s in r.state:
        s[:] = rng.integers(0, 256, s.size, dtype=np.uint8)
    return r


def pairs(src, dst):
    return [(src[0] if len(src) == 1 else src[i], d) for i, d in enumerate(dst)
            if (src[0] if len(src) == 1 else src[i]) >= 0 and d >= 0]


def expected(tp: int, rank: int, strided: bool, seed: int) -> HybridRank:
    """What decode rank `rank` of TP `tp` must hold after the room."""
    pre, want = prefill_rank(strided, seed), HybridRank(tp, rank, strided, UNWRITTEN)
    first = rank * want.heads
    for layers, page_pairs in (((0, 1), pairs(SRC, DST)), ((2, 3), pairs(*GROUP_PAIRS_1))):
        for layer in layers:
            for kv in range(2):
                for s, q in page_pairs:
                    src = pre.page(layer, kv, s).reshape(TOKENS, HEADS, HEAD_BYTES)
                    dst = want.page(layer, kv, q).reshape(TOKENS, want.heads, HEAD_BYTES)
                    dst[:] = src[:, first:first + want.heads, :]
    shard = SHARDED_SLOT // tp
    for s, q in pairs(GROUP_SRC[0], GROUP_DST[0]):
        want.slot(0, q)[:] = pre.slot(0, s)[rank * shard:(rank + 1) * shard]
        want.slot(1, q)[:] = pre.slot(1, s)
    return want


GROUP_PAIRS_1 = (GROUP_SRC[1], GROUP_DST[1])


def prefill_main(cfg, results, stop):
    try:
        apply_settings(FAST_TIMEOUTS)
        import pdkv
        mem = prefill_rank(cfg["strided"], cfg["seed"])
        mgr = pdkv.KVManager(mem.kv_args(pdkv), "prefill", cfg["addr"])
        results.put(("ready", "prefill", 0, os.getpid()))
        sender = pdkv.KVSender(mgr, cfg["addr"], cfg["room"])
        sender.init(len(SRC))
        sender.send(np.array(SRC[:2]))
        sender.send(np.array(SRC[2:]), state_indices=[np.array(g) for g in GROUP_SRC])
        state = int(wait_terminal(sender, 30))
        results.put(("done", "prefill", 0, {"state": state, "reason": _reason(sender)}))
        wait_flag(stop, 120)
        mgr.shutdown()
    except Exception:
        results.put(("error", "prefill", 0, traceback.format_exc()))


def decode_main(cfg, results, stop):
    rank = cfg["rank"]
    try:
        apply_settings(FAST_TIMEOUTS)
        import pdkv
        mem = HybridRank(cfg["tp"], rank, cfg["strided"], UNWRITTEN)
        mgr = pdkv.KVManager(mem.kv_args(pdkv), "decode", cfg["addr"])
        results.put(("ready", "decode", rank, os.getpid()))
        receiver = pdkv.KVReceiver(mgr, cfg["addr"], cfg["room"])
        receiver.init()
        receiver.send_metadata(DST, state_indices=GROUP_DST)
        state = int(wait_terminal(receiver, 30))
        want = expected(cfg["tp"], rank, cfg["strided"], cfg["seed"])
        bytes_ok = (all(np.array_equal(a, b) for a, b in zip(mem.regions, want.regions)) and
                    all(np.array_equal(a, b) for a, b in zip(mem.state, want.state)))
        results.put(("done", "decode", rank,
                     {"state": state, "reason": _reason(receiver), "bytes_ok": bytes_ok}))
        wait_flag(stop, 120)
        mgr.shutdown()
    except Exception:
        results.put(("error", "decode", rank, traceback.format_exc()))


def _reason(room) -> str:
    try:
        room.failure_exception()
    except Exception as e:  # the room failed: its reason
        return str(e)
    return ""
