"""Hybrid-model ranks around pdkv's sglang classes: KV plus the state components sglang
lists in KVArgs.state_types, the way its setup_state_kv_args fills them.

"mamba_swa" (an MHA model): full-attention layers; one sliding-window layer whose K and V
pools are the SWA component (laid out like the full pool: K buffers, then V buffers); a
Mamba component of two tensors (conv, temporal) with one slot per request, each rank
holding its contiguous 1/TP of a slot. "mamba": the same without the SWA layer. "dsa" (an MLA model): latent layers and the DSA
indexer component, one page-indexed buffer per layer, the same on every rank.

Prefill: KVSender -> WaitingForInput -> init -> write pools -> send(first chunk) ->
send(last chunk, state_indices=[one list per state type]) -> Success. Decode: KVReceiver
-> init(0) -> WaitingForInput -> send_metadata(pages, aux, state_indices) -> Success ->
every byte of its pages, window pages and state slot checked. numpy host memory; a
uint8 "head" of HEAD_BYTES bytes.
"""
from __future__ import annotations

import numpy as np

from engine_replay import wait_stop
from pdkv.testing import heads_of
from sglang_replay import _poll_until

HEADS, HEAD_BYTES, PAGE, LAYERS, POOL_PAGES, SLOTS = 4, 8, 4, 2, 16, 4
CONV, TEMPORAL, LATENT, INDEXER = 24, 48, 16, 12  # a whole slot / token's bytes


def value(buf: int, tokens, heads, width: int, seed: int) -> np.ndarray:
    """(tokens, heads, width) bytes of buffer `buf`, from global token / head numbers."""
    t = np.asarray(tokens).reshape(-1, 1, 1)
    h = np.asarray(heads).reshape(1, -1, 1)
    d = np.arange(width).reshape(1, 1, -1)
    return ((buf * 37 + t * 13 + h * 7 + d * 3 + seed * 29 + 1) % 251).astype(np.uint8)


def slot_value(tensor: int, lo: int, hi: int, seed: int) -> np.ndarray:
    return ((tensor * 41 + np.arange(lo, hi) * 5 + seed * 11 + 3) % 251).astype(np.uint8)


class HybridPool:
    """One rank's pools: `n` heads of the model's HEADS (MHA) or the latent (MLA)."""

    def __init__(self, family: str, rank: int, tp: int):
        self.family, self.mla = family, family == "dsa"
        self.first, self.n = heads_of(rank, tp, HEADS, mla=self.mla)
        self.width = LATENT if self.mla else HEAD_BYTES
        per_token = (1, LATENT) if self.mla else (self.n, HEAD_BYTES)
        count = LAYERS if self.mla else 2 * LAYERS
        self.kv = [np.zeros((POOL_PAGES * PAGE, *per_token), np.uint8) for _ in range(count)]
        self.swa = [np.zeros_like(self.kv[0]) for _ in range(2)] \
            if family == "mamba_swa" else []
        self.slot_bytes = [CONV // tp, TEMPORAL // tp]
        self.mamba = [] if self.mla else [np.zeros((SLOTS, b), np.uint8) for b in self.slot_bytes]
        self.dsa = [np.zeros((POOL_PAGES * PAGE, INDEXER), np.uint8)
                    for _ in range(LAYERS)] if self.mla else []
        self.aux = np.zeros((8, 8), np.int64)
        self.rank, self.tp = rank, tp

    def kv_args(self, KVArgs, StateType):
        a = KVArgs()
        a.engine_rank, a.page_size, a.system_dp_rank, a.pp_rank = self.rank, PAGE, 0, 0
        a.kv_data_ptrs = [b.ctypes.data for b in self.kv]
        a.kv_data_lens = [b.nbytes for b in self.kv]
        a.kv_item_lens = [b[0].nbytes * PAGE for b in self.kv]
        a.kv_head_num, a.total_kv_head_num = (1, 1) if self.mla else (self.n, HEADS)
        a.aux_data_ptrs, a.aux_data_lens = [self.aux.ctypes.data], [self.aux.nbytes]
        a.aux_item_lens = [self.aux[0].nbytes]
        comps = []
        if self.mla:
            comps.append((StateType.DSA, self.dsa, [b[0].nbytes * PAGE for b in self.dsa]))
        else:
            comps.append((StateType.MAMBA, self.mamba, [b[0].nbytes for b in self.mamba]))
            if self.swa:
                comps.append((StateType.SWA, self.swa, [b[0].nbytes * PAGE for b in self.swa]))
        a.state_types = [c[0] for c in comps]
        a.state_data_ptrs = [[b.ctypes.data for b in c[1]] for c in comps]
        a.state_data_lens = [[b.nbytes for b in c[1]] for c in comps]
        a.state_item_lens = [c[2] for c in comps]
        a.state_dim_per_tensor = [[] for _ in comps]
        a.state_conv_shard_groups = [[] for _ in comps]
        a.is_hybrid_mla_backend = False
        return a

    def state_indices(self, pages, swa_pages, slot):
        """sglang's state_indices: one list per state type, in state_types order."""
        if self.mla:
            return [pages]  # the DSA indexer is indexed by KV page
        return [[slot], swa_pages] if self.swa else [[slot]]

    def tokens(self, pages, n_tokens):
        return [pages[t // PAGE] * PAGE + t % PAGE for t in range(n_tokens)]

    def write(self, pages, n_tokens, swa_pages, window, slot, seed):
        locs = self.tokens(pages, n_tokens)
        heads = range(self.first, self.first + self.n)
        for b, buf in enumerate(self.kv):
            buf[locs] = value(b, range(n_tokens), heads, self.width, seed)
        for b, buf in enumerate(self.swa):  # only the window's tokens live in the SWA pool
            buf[self.tokens(swa_pages, len(window))] = value(100 + b, window, heads,
                                                             HEAD_BYTES, seed)
        for t, buf in enumerate(self.mamba):
            lo = self.rank * self.slot_bytes[t]
            buf[slot] = slot_value(t, lo, lo + self.slot_bytes[t], seed)
        for b, buf in enumerate(self.dsa):  # indexer pages: replicated, no heads
            buf[locs] = value(200 + b, range(n_tokens), [0], INDEXER, seed)[:, 0, :]

    def check(self, pages, n_tokens, swa_pages, window, slot, seed) -> dict:
        locs = self.tokens(pages, n_tokens)
        heads = range(self.first, self.first + self.n)
        got = {"kv": all(np.array_equal(buf[locs], value(b, range(n_tokens), heads,
                                                          self.width, seed))
                         for b, buf in enumerate(self.kv))}
        if self.swa:
            got["swa"] = all(np.array_equal(buf[self.tokens(swa_pages, len(window))],
                                            value(100 + b, window, heads, HEAD_BYTES, seed))
                             for b, buf in enumerate(self.swa))
        if self.mamba:
            got["mamba"] = all(np.array_equal(
                buf[slot], slot_value(t, self.rank * self.slot_bytes[t],
                                      (self.rank + 1) * self.slot_bytes[t], seed))
                for t, buf in enumerate(self.mamba))
        if self.dsa:
            got["dsa"] = all(np.array_equal(buf[locs], value(200 + b, range(n_tokens), [0],
                                                              INDEXER, seed)[:, 0, :])
                             for b, buf in enumerate(self.dsa))
        return got


def _classes():
    from sglang.srt.disaggregation.base.conn import KVArgs, KVPoll, StateType
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.server_args import ServerArgs

    from pdkv.integrations.sglang.conn import PdkvKVManager, PdkvKVReceiver, PdkvKVSender
    return KVArgs, KVPoll, StateType, DisaggregationMode, ServerArgs, (
        PdkvKVManager, PdkvKVSender, PdkvKVReceiver)


def _plan(n_tokens: int, side: str, k: int, longer: str = ""):
    """Pages, the window's SWA pages and tokens (the last 2 pages' tokens), the Mamba slot.
    ``longer`` ("p" or "d"): that side's window list holds one page more at its end, as
    sglang's prefill lists when the token it sampled opens a page past the prompt."""
    n_pages = -(-n_tokens // PAGE)
    base = 1 + 5 * k if side == "p" else 12 - 5 * k
    pages = list(range(base, base + n_pages)) if side == "p" else \
        list(range(base + n_pages - 1, base - 1, -1))
    first_window_page = max(0, n_pages - 2)
    window = range(first_window_page * PAGE, n_tokens)
    swa_pages = [POOL_PAGES - 1 - k * 2 - i for i in range(n_pages - first_window_page)] \
        if side == "p" else [1 + 3 * k + i for i in range(n_pages - first_window_page)]
    if longer == side:
        swa_pages.append(swa_pages[-1] - 1 if side == "p" else swa_pages[-1] + 1)
    slot = k + 1 if side == "p" else SLOTS - 1 - k
    return pages, swa_pages, window, slot


def prefill_main(cfg, out_q, in_q):
    """cfg: family, rank, tp, requests=[(room, tokens, seed)]."""
    KVArgs, KVPoll, StateType, Mode, ServerArgs, (Manager, Sender, _) = _classes()
    host, port = cfg["addr"].split(":")
    server_args = ServerArgs(host=host, disaggregation_bootstrap_port=int(port),
                             disaggregation_mode="prefill", tp_size=cfg["tp"])
    pool = HybridPool(cfg["family"], cfg["rank"], cfg["tp"])
    mgr = Manager(pool.kv_args(KVArgs, StateType), Mode.PREFILL, server_args, pool.mla)
    out_q.put(("ready", cfg["name"]))
    outcome = {}
    for k, (room, n_tokens, seed) in enumerate(cfg["requests"]):
        s = Sender(mgr=mgr, bootstrap_addr=cfg["addr"], bootstrap_room=room,
                   dest_tp_ranks=[cfg["rank"]], pp_rank=0)
        assert _poll_until(s, (KVPoll.WaitingForInput, KVPoll.Failed), 30) == \
            KVPoll.WaitingForInput, room
        pages, swa_pages, window, slot = _plan(n_tokens, "p", k, cfg.get("longer", ""))
        s.init(len(pages), k)
        pool.write(pages, n_tokens, swa_pages, window, slot, seed)
        if cfg.get("longer") == "p":  # the sampled token's page: must not reach the decode
            for buf in pool.swa:
                buf[pool.tokens(swa_pages[-1:], PAGE)] = 0xEE
        pool.aux[k, 0] = room
        state = pool.state_indices(pages, swa_pages, slot)
        s.send(np.array(pages[:1], np.int32))
        s.send(np.array(pages[1:], np.int32), state_indices=state)
        outcome[room] = int(_poll_until(s, (KVPoll.Success, KVPoll.Failed), 30))
    out_q.put(("done", cfg["name"], {"outcome": outcome}))
    wait_stop(in_q)
    mgr.shutdown()


def decode_main(cfg, out_q, in_q):
    """cfg: family, rank, tp, requests."""
    KVArgs, KVPoll, StateType, Mode, ServerArgs, (Manager, _, Receiver) = _classes()
    server_args = ServerArgs(host="127.0.0.1", disaggregation_mode="decode",
                             tp_size=cfg["tp"])
    pool = HybridPool(cfg["family"], cfg["rank"], cfg["tp"])
    mgr = Manager(pool.kv_args(KVArgs, StateType), Mode.DECODE, server_args, pool.mla)
    out_q.put(("ready", cfg["name"]))
    outcome = {}
    for k, (room, n_tokens, seed) in enumerate(cfg["requests"]):
        r = Receiver(mgr=mgr, bootstrap_addr=cfg["addr"], bootstrap_room=room)
        r.init(0)
        assert _poll_until(r, (KVPoll.WaitingForInput, KVPoll.Failed), 30) == \
            KVPoll.WaitingForInput, room
        longer = cfg.get("longer", "")
        pages, swa_pages, window, slot = _plan(n_tokens, "d", k, longer)
        state = pool.state_indices(pages, swa_pages, slot)
        r.send_metadata(np.array(pages, np.int32), k, state)
        state_end = _poll_until(r, (KVPoll.Success, KVPoll.Failed), 30)
        outcome[room] = dict(pool.check(pages, n_tokens, swa_pages, window, slot, seed),
                             state=int(state_end), aux=int(pool.aux[k, 0]) == room)
        if longer == "d":  # the page only the decode listed: nothing may have written it
            outcome[room]["extra_page_untouched"] = all(
                not buf[pool.tokens(swa_pages[-1:], PAGE)].any() for buf in pool.swa)
    out_q.put(("done", cfg["name"], {"outcome": outcome}))
    wait_stop(in_q)
    mgr.shutdown()
