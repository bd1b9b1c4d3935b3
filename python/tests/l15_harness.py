"""MLA L1.5 partial page ownership (docs/API.md) across real processes: the ranks of
kv_harness, but each side may hold only part of a request's pages.

Prefill ON: prefill rank p of P owns request page i iff i % P == p and keeps it in a local
page of its own; the chunk's kv_indices are placeholders filled with junk, so a transfer
that read them instead of the local pages is caught. Decode ON: decode rank d owns a
rank-dependent subset of the pages after the decode prefix and receives each into a local
page; its kv_indices and every page it does not own must stay zero. With both ON only
pages owned on both sides move, and as the prefill ranks partition the pages every decode
rank still gets each page it owns.
"""
from __future__ import annotations

import os

import numpy as np

from kv_harness import (Cluster, RankMemory, apply_env, pages_for, report_and_stay,
                        report_crash)
from pdkv.testing import failed_rooms, wait_flag, wait_terminal
from pdkv.testing.processes import SPAWN

JUNK = 0xEE


def prefill_owns(page: int, rank: int, tp: int, on: bool) -> bool:
    return page % tp == rank if on else True


def decode_owns(page: int, rank: int, on: bool) -> bool:
    return (page * 5 + rank) % 3 != 0 if on else True


def _as_given(values: np.ndarray, style: int):
    """The same indices as an int64 array, an int32 array or a list (the API takes all)."""
    return [values.astype(np.int64), values.astype(np.int32), values.tolist()][style % 3]


def _open_rank(cfg, role, results):
    """Applies the rank's settings, opens its manager (L1.5 cache as cfg["l15_<role>"] says)
    and tells the test it is ready. Returns (pdkv, memory, manager, whether its L1.5 cache
    is on, its rank within TP)."""
    apply_env(cfg.get("env"))
    import pdkv
    shape, tp, dp, rank = cfg["shape"], cfg["tp"], cfg["dp"], cfg["engine_rank"]
    mem = RankMemory(shape, tp, rank % tp)
    args = mem.kv_args(pdkv, rank, tp, dp)
    args.enable_mla_l1_5_cache = on = cfg["l15_" + role]
    mgr = pdkv.KVManager(args, role, cfg["addr"])
    results.put(("ready", role, rank, os.getpid()))
    return pdkv, mem, mgr, on, rank % tp


def l15_prefill_main(cfg: dict, results, go, stop):
    try:
        pdkv, mem, mgr, on, rank = _open_rank(cfg, "prefill", results)
        n, tp = cfg["pages"], cfg["tp"]
        senders = {}
        for k, room in enumerate(cfg["rooms"]):
            pool = pages_for(cfg["rooms"], room, cfg["engine_rank"], 2 * n,
                             mem.shape.capacity, "src")
            kv, local = pool[:n], pool[n:]
            owned = np.array([prefill_owns(i, rank, tp, on) for i in range(n)])
            for b, buf in enumerate(mem.bufs):
                want = mem.expected(b, room, n)
                if on:
                    buf[kv] = JUNK
                    buf[local[owned]] = want[owned]
                else:
                    buf[kv] = want
            s = pdkv.KVSender(mgr, cfg["addr"], room)
            s.init(n)
            senders[room] = (s, kv, local, owned, k)
        wait_flag(go, 60)
        rejected = 0
        for room, (s, kv, local, owned, k) in senders.items():
            for c, idx in enumerate(np.array_split(np.arange(n), cfg.get("chunks", 1))):
                if not on:
                    s.send(_as_given(kv[idx], k + c))
                    continue
                mask = owned[idx] if (k + c) % 2 else owned[idx].tolist()
                if cfg.get("bad_first"):
                    try:  # one local page missing: refused, and the room is unharmed
                        s.send(kv[idx], page_transfer_mask=mask,
                               page_local_indices=local[idx][owned[idx]][:-1])
                    except ValueError:
                        rejected += 1
                s.send(_as_given(kv[idx], k + c), page_transfer_mask=mask,
                       page_local_indices=_as_given(local[idx][owned[idx]], k + c + 1))
        states = {room: int(wait_terminal(s, cfg.get("timeout", 30)))
                  for room, (s, *_rest) in senders.items()}
        reasons, _ = failed_rooms({room: s for room, (s, *_rest) in senders.items()})
        report_and_stay(results, "prefill", cfg["engine_rank"],
                        {"states": states, "reasons": reasons, "rejected": rejected,
                         "active": mgr.active_rooms()}, mgr, stop)
    except Exception:
        report_crash(results, "prefill", cfg)


def l15_decode_main(cfg: dict, results, go, stop):
    try:
        pdkv, mem, mgr, on, rank = _open_rank(cfg, "decode", results)
        n = cfg["pages"]
        prefix = cfg.get("prefix_pages", 0)
        m = n - prefix  # pages the decode asks for
        receivers = {}
        for k, room in enumerate(cfg["rooms"]):
            pool = pages_for(cfg["rooms"], room, cfg["engine_rank"], 2 * n,
                             mem.shape.capacity, "dst")
            kv, local = pool[:m], pool[n:n + m]
            owned = np.array([decode_owns(prefix + i, rank, on) for i in range(m)], dtype=bool)
            r = pdkv.KVReceiver(mgr, cfg["addr"], room)
            r.init()
            extra = {}
            if on:
                local_list = local[owned]
                mapping = np.cumsum(owned) - 1
                if k % 2:  # the local list in reverse, the mapping saying so
                    local_list = local_list[::-1]
                    mapping = np.where(owned, len(local_list) - 1 - mapping, -1)
                extra = dict(page_transfer_mask=owned if k % 2 else owned.tolist(),
                             page_indices_mapping=_as_given(mapping, k),
                             page_local_indices=_as_given(local_list, k + 1))
            r.send_metadata(_as_given(kv, k), decode_prefix_len=prefix * mem.shape.page_size,
                            **extra)
            receivers[room] = (r, kv, local, owned)
        states, ok = {}, {}
        for room, (r, kv, local, owned) in receivers.items():
            state = wait_terminal(r, cfg.get("timeout", 30))
            states[room] = int(state)
            good = state == pdkv.KVPoll.Success
            for b, buf in enumerate(mem.bufs):
                want = mem.expected(b, room, n)[prefix:]
                if on:
                    good = good and np.array_equal(buf[local[owned]], want[owned])
                    good = good and not buf[kv].any() and not buf[local[~owned]].any()
                else:
                    good = good and np.array_equal(buf[kv], want) and not buf[local].any()
            ok[room] = bool(good)
        reasons, _ = failed_rooms({room: r for room, (r, *_rest) in receivers.items()})
        report_and_stay(results, "decode", cfg["engine_rank"],
                        {"states": states, "bytes_ok": ok, "reasons": reasons,
                         "owned": {room: int(o.sum()) for room, (*_rest, o) in receivers.items()},
                         "active": mgr.active_rooms()}, mgr, stop)
    except Exception:
        report_crash(results, "decode", cfg)


class L15Cluster(Cluster):
    """kv_harness.Cluster with the L1.5 rank programs (one DP group per side)."""

    def __init__(self, pdkv, shape, p_tp, d_tp, l15_prefill, l15_decode, rooms=(1,), pages=8,
                 **extra):
        super().__init__(pdkv, shape, p_tp=p_tp, d_tp=d_tp, rooms=rooms, pages=pages)
        base = dict(shape=shape, addr=self.addr, rooms=list(rooms), pages=pages,
                    l15_prefill=l15_prefill, l15_decode=l15_decode, **extra)
        self.procs = {}
        for role, tp, target in (("prefill", p_tp, l15_prefill_main),
                                 ("decode", d_tp, l15_decode_main)):
            for r in range(tp):
                cfg = dict(base, tp=tp, dp=1, engine_rank=r)
                self.procs[(role, r)] = SPAWN.Process(target=target,
                                                      args=(cfg, self.results, self.go, self.stop))
