"""sglang instances replayed around pdkv in the call order of sglang's own schedulers, with
the backend selected as a user selects it: ``--disaggregation-transfer-backend pdkv``
through sglang's plugin loading (load_plugins() in each process, pdkv's shipped entry
point on the path).

Prefill (prefill.py PrefillBootstrapQueue): KVArgs filled field by field as its
_init_kv_manager does (head counts set, state fields empty, no memory labels) -> manager
-> per request KVSender(mgr=, bootstrap_addr=, bootstrap_room=, dest_tp_ranks=,
pp_rank=) -> poll until WaitingForInput -> pop_decode_prefix_len() -> init(pages, aux)
-> forward -> send(chunk) per chunk -> poll until Success.
Decode (decode.py DecodePreallocQueue / DecodeTransferQueue): KVArgs as its
_init_kv_manager fills them (no head counts: only the staging option sets them; state
fields empty) -> per request KVReceiver(mgr=, bootstrap_addr=, bootstrap_room=) -> fast
path prefill_info_table.get(addr) -> else pending: try_ensure_parallel_info(addr), the DP
group from dp_size / follow_bootstrap_room or CommonKVReceiver.query_prefill_dp_ranks ->
init(dp_rank) -> handshake polling (reading conclude_state of every queued receiver) ->
send_metadata(int32 pages, aux, state_indices, decode_prefix_len=) and, for a retracted
request, kv_manager.submit_prefill_recompute(receiver, payload) -> poll with the metadata
gate (Success counts once the aux row's room is written) -> clear().
cfg["placement"] maps each room to the prefill DP group a load balancer chose; a prefill
rank serves only its own rooms. cfg["attn_tp"] (default 1) is the prefill's attention TP
size per DP group (tp_size = dp x attn_tp, engine_rank the global TP rank, as prefill.py
sets it); a decode of cfg["tp"] ranks (default 1) holds cfg["rank"]'s share of the heads.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from engine_replay import wait_stop
from pdkv.testing import heads_of
from sglang_replay import AUX_ROWS, Pool, _expected, _poll_until


def _selected(cfg):
    sys.path.insert(0, cfg["plugin_site"])
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang.srt.disaggregation.utils import KVClassType, TransferBackend, get_kv_class
    backend = TransferBackend("pdkv")  # what the scheduler builds from the flag's value
    return backend, lambda t: get_kv_class(backend, getattr(KVClassType, t))


def _empty_state_fields(a):
    # setup_state_kv_args for a pool without state buffers
    a.state_types, a.state_data_ptrs, a.state_data_lens, a.state_item_lens = [], [], [], []
    a.state_dim_per_tensor, a.state_conv_shard_groups = [], []
    a.is_hybrid_mla_backend = False


def _fill_common(a, pool: Pool):
    a.kv_data_ptrs = [b.data_ptr() for b in pool.bufs]
    a.kv_data_lens = [b.numel() * b.element_size() for b in pool.bufs]
    a.kv_item_lens = [b[0].numel() * b.element_size() * pool.page_size for b in pool.bufs]
    a.page_size = pool.page_size
    a.aux_data_ptrs = [pool.output_ids.data_ptr(), pool.rooms.data_ptr()]
    a.aux_data_lens = [pool.output_ids.numel() * 4, pool.rooms.numel() * 8]
    a.aux_item_lens = [pool.output_ids[0].numel() * 4, pool.rooms[0].numel() * 8]
    _empty_state_fields(a)
    a.ib_device, a.gpu_id = None, 0


def prefill_main(cfg, out_q, in_q):
    """cfg: rank (global TP rank; DP group rank // attn_tp), dp, attn_tp, heads (the model's
    KV heads), page_size, addr, requests=[(room, tokens, seed)], placement {room: dp group},
    hold (rooms never sent)."""
    import torch
    backend, kv_class = _selected(cfg)
    attn_tp = cfg.get("attn_tp", 1)
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.utils import DisaggregationMode, kv_to_page_indices
    from sglang.srt.server_args import ServerArgs
    host, port = cfg["addr"].split(":")
    server_args = ServerArgs(host=host, disaggregation_bootstrap_port=int(port),
                             disaggregation_mode="prefill", tp_size=cfg["dp"] * attn_tp,
                             dp_size=cfg["dp"], enable_dp_attention=True,
                             disaggregation_transfer_backend=backend.value,
                             load_balance_method="round_robin")
    first_head, n_heads = heads_of(cfg["rank"] % attn_tp, attn_tp, cfg["heads"])
    pool = Pool(torch, False, n_heads, cfg["page_size"])
    a = kv_class("KVARGS")()
    a.engine_rank, a.pp_rank, a.system_dp_rank = cfg["rank"], 0, cfg["rank"] // attn_tp
    a.prefill_start_layer, a.prefill_end_layer, a.mla_compression_ratios = 0, None, None
    _fill_common(a, pool)
    a.kv_head_num, a.total_kv_head_num = n_heads, cfg["heads"]
    mgr = kv_class("MANAGER")(a, DisaggregationMode.PREFILL, server_args, False)
    out_q.put(("ready", cfg["name"]))
    mine = [r for r in cfg["requests"] if cfg["placement"][r[0]] == cfg["rank"] // attn_tp]
    senders = {}
    for k, (room, n_tokens, seed) in enumerate(mine):
        s = kv_class("SENDER")(mgr=mgr, bootstrap_addr=cfg["addr"], bootstrap_room=room,
                               dest_tp_ranks=[cfg["rank"]], pp_rank=0)
        senders[room] = (s, n_tokens, seed, k)
    outcome = {}
    for room, (s, n_tokens, seed, aux) in senders.items():
        if room in cfg.get("hold", ()):
            continue
        state = _poll_until(s, (KVPoll.WaitingForInput, KVPoll.Failed), 30)
        assert state == KVPoll.WaitingForInput, f"room {room} never bootstrapped: {state}"
        prefix = s.pop_decode_prefix_len()
        n_pages = -(-(n_tokens - prefix) // pool.page_size)
        s.init(n_pages, aux)
        pages = list(range(1 + 8 * aux, 1 + 8 * aux + n_pages))
        locs = torch.tensor(pool.token_locs(pages, n_tokens))
        for b, buf in enumerate(pool.bufs):
            buf[locs] = _expected(torch, pool, b, range(n_tokens), first_head, n_heads, seed)
        pool.output_ids[aux, 0] = 1000 + room % 1000
        pool.rooms[aux, 0] = room
        s.send(kv_to_page_indices(np.array(pool.token_locs(pages, n_tokens)), pool.page_size))
    for room, (s, *_rest) in senders.items():
        outcome[room] = int(_poll_until(s, (KVPoll.Success, KVPoll.Failed), 30))
    out_q.put(("done", cfg["name"], {"outcome": outcome}))
    wait_stop(in_q)
    mgr.shutdown()


class _DecodeRequest:
    def __init__(self, room, n_tokens, seed, receiver, rebootstrap):
        self.room, self.n_tokens, self.seed = room, n_tokens, seed
        self.receiver, self.rebootstrap = receiver, rebootstrap
        self.waiting_for_input, self.dp_rank, self.aux, self.pages = False, None, None, None


def decode_main(cfg, out_q, in_q):
    """cfg: heads (model's KV heads, in cfg["model_dir"]/config.json), tp and rank (this
    decode rank; default 1 and 0), page_size, addr, requests, rebootstrap (rooms retracted
    and handed back to the prefill)."""
    import torch
    backend, kv_class = _selected(cfg)
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.common.conn import CommonKVReceiver
    tp, rank = cfg.get("tp", 1), cfg.get("rank", 0)
    from sglang.srt.disaggregation.utils import DisaggregationMode, kv_to_page_indices
    from sglang.srt.server_args import ServerArgs
    server_args = ServerArgs(host="127.0.0.1", disaggregation_bootstrap_port=8998,
                             disaggregation_mode="decode", tp_size=tp,
                             disaggregation_transfer_backend=backend.value,
                             model_path=cfg["model_dir"])
    first_head, n_heads = heads_of(rank, tp, cfg["heads"])
    pool = Pool(torch, False, n_heads, cfg["page_size"])
    a = kv_class("KVARGS")()
    a.engine_rank, a.pp_rank, a.system_dp_rank = rank, 0, 0
    _fill_common(a, pool)  # no kv_head_num / total_kv_head_num, no kv_data_mem_kinds
    mgr = kv_class("MANAGER")(a, DisaggregationMode.DECODE, server_args, False)
    out_q.put(("ready", cfg["name"]))
    addr = cfg["addr"]
    queue, pending = [], []
    for room, n_tokens, seed in cfg["requests"]:
        r = kv_class("RECEIVER")(mgr=mgr, bootstrap_addr=addr, bootstrap_room=room)
        dr = _DecodeRequest(room, n_tokens, seed, r, room in cfg.get("rebootstrap", ()))
        queue.append(dr)
        info = mgr.prefill_info_table.get(addr)  # _resolve_prefill_dp_rank's fast path
        if info is not None and info.dp_size == 1:
            dr.dp_rank = 0
            r.init(0)
        else:
            pending.append(dr)
    transfer, next_page, deadline = [], 3, time.monotonic() + 30
    while (queue or pending) and time.monotonic() < deadline:
        # _resolve_pending_reqs
        if pending and mgr.try_ensure_parallel_info(addr):
            info = mgr.prefill_info_table[addr]
            need = []
            for dr in pending:
                if info.dp_size == 1:
                    dr.dp_rank = 0
                elif info.follow_bootstrap_room:
                    dr.dp_rank = dr.room % info.dp_size
                else:
                    need.append(dr)
            if need:
                ranks = CommonKVReceiver.query_prefill_dp_ranks(addr, [d.room for d in need])
                for dr in need:
                    if str(dr.room) in ranks:
                        dr.dp_rank = int(ranks[str(dr.room)])
            for dr in [d for d in pending if d.dp_rank is not None]:
                dr.receiver.init(dr.dp_rank)
            pending = [d for d in pending if d.dp_rank is None]
        # _update_handshake_waiters: polls unless every receiver waits and none failed
        if not (all(d.waiting_for_input for d in queue) and
                not any(d.receiver.conclude_state == KVPoll.Failed for d in queue)):
            for dr in queue:
                if dr.receiver.poll() == KVPoll.WaitingForInput:
                    dr.waiting_for_input = True
        # pop_preallocated
        for dr in [d for d in queue if d.waiting_for_input]:
            n_pages = -(-dr.n_tokens // pool.page_size)
            dr.pages = list(range(next_page, next_page + 2 * n_pages, 2))
            next_page += 2 * n_pages
            dr.aux = AUX_ROWS - 1 - len(transfer)
            locs = np.array(pool.token_locs(dr.pages, dr.n_tokens), dtype=np.int64)
            dr.receiver.send_metadata(kv_to_page_indices(locs, pool.page_size).astype(np.int32),
                                      dr.aux, [None for _ in mgr.kv_args.state_types],
                                      decode_prefix_len=0)
            if dr.rebootstrap:
                mgr.submit_prefill_recompute(dr.receiver, {"rid": f"r{dr.room}",
                                                           "bootstrap_room": dr.room})
            transfer.append(dr)
            queue.remove(dr)
        time.sleep(0.005)
    assert not queue and not pending, [d.room for d in queue + pending]
    outcome = {}
    for dr in transfer:
        end = time.monotonic() + 30
        while True:  # pop_transferred with the metadata gate
            state = dr.receiver.poll()
            if state == KVPoll.Success and int(pool.rooms[dr.aux, 0]) == 0:
                state = KVPoll.Transferring
            if state in (KVPoll.Success, KVPoll.Failed) or time.monotonic() > end:
                break
            time.sleep(0.005)
        reason = None
        if state == KVPoll.Failed:
            try:
                dr.receiver.failure_exception()
            except Exception as e:  # noqa: BLE001 - sglang catches broadly too
                reason = str(e)
        locs = torch.tensor(pool.token_locs(dr.pages, dr.n_tokens))
        bytes_ok = all(torch.equal(buf[locs], _expected(torch, pool, b, range(dr.n_tokens),
                                                         first_head, n_heads, dr.seed))
                       for b, buf in enumerate(pool.bufs))
        outcome[dr.room] = {"state": int(state), "reason": reason, "dp_rank": dr.dp_rank,
                            "conclude_state": dr.receiver.conclude_state,
                            "bytes_ok": bytes_ok,
                            "meta_ok": int(pool.rooms[dr.aux, 0]) == dr.room}
        dr.receiver.clear()
    out_q.put(("done", cfg["name"], {"outcome": outcome}))
    wait_stop(in_q)
    mgr.shutdown()
