"""sglang instances replayed around pdkv's sglang classes, in sglang's call order.

Prefill (sglang's PrefillBootstrapQueue, then the forward, then the inflight queue):
KVSender(mgr, addr, room, dest_tp_ranks, pp_rank) -> poll until WaitingForInput ->
init(num_pages, aux_index) -> forward writes KV -> send(page chunk) per chunk (the first
token and room in the metadata row before the last) -> poll until Success.
Decode (DecodePreallocQueue, then the transfer queue): KVReceiver(mgr, addr, room) ->
init(prefill_dp_rank) -> poll until WaitingForInput -> send_metadata(pages, aux_index)
-> poll until Success, then check every KV byte and the metadata row.
Buffers are sglang's MHATokenToKVPool (per-layer K and V, token-major) or
MLATokenToKVPool (per-layer latent), real CPU tensors, and a MetadataBuffers-like aux pool.
With cfg["device"] the KV pools are device pools: pdkv gets fake CUDA memory mirroring
the CPU tensors (fake_cuda_tensor.DeviceMirror, GPU rank % 2), labelled "VRAM" and with
gpu_id set as sglang does; the prefill's forward writes reach the device before it sends,
and the decode checks what it reads back from its device pools. Aux stays in host memory.
With cfg["pp"] the prefill runs that many pipeline stages: a rank of stage cfg["stage"]
holds the global layers cfg["layer_ids"] only (and writes another metadata row than the
last stage, which must not reach the decode); a decode of cfg["pp"] stages holds its
stage's layers, a decode of one stage (no "stage") every layer.
"""
from __future__ import annotations

import time

import numpy as np

from engine_replay import pattern, wait_stop
from pdkv.testing import heads_of

LAYERS, HEAD_DIM, LATENT, POOL_TOKENS, AUX_ROWS = 2, 8, 24, 256, 8


def nbytes(t) -> int:
    return t.numel() * t.element_size()  # Debian's torch 1.13 has no Tensor.nbytes


class Pool:
    """Per-layer K/V (or latent) buffers of (POOL_TOKENS + page_size, heads, dim) tokens."""

    def __init__(self, torch, mla: bool, heads: int, page_size: int, layer_ids=None):
        import torch as _t  # noqa: F401
        shape = (POOL_TOKENS + page_size, 1, LATENT) if mla else \
            (POOL_TOKENS + page_size, heads, HEAD_DIM)
        dtype = torch.bfloat16 if mla else torch.float16
        self.layer_ids = list(range(LAYERS)) if layer_ids is None else list(layer_ids)
        layers = len(self.layer_ids)
        n = layers if mla else 2 * layers  # k_buffer[0..L) then v_buffer[0..L)
        self.bufs = [torch.zeros(shape, dtype=dtype) for _ in range(n)]
        self.output_ids = torch.zeros((AUX_ROWS, 16), dtype=torch.int32)
        self.rooms = torch.zeros((AUX_ROWS, 8), dtype=torch.int64)
        self.mla, self.page_size = mla, page_size
        self.mirrors = None

    def to_device(self, gpu: int) -> None:
        from fake_cuda_tensor import DeviceMirror
        self.gpu = gpu
        self.mirrors = [DeviceMirror(b, gpu) for b in self.bufs]

    def upload(self) -> None:
        for m in self.mirrors or ():
            m.upload()

    def download(self) -> None:
        for m in self.mirrors or ():
            m.download()

    def kv_args(self, KVArgs, engine_rank: int, heads: int, total_heads: int, stage: int = 0):
        a = KVArgs()
        a.engine_rank = engine_rank
        a.kv_data_ptrs = [b.data_ptr() for b in self.bufs]
        if self.mirrors:  # as sglang describes a GPU pool
            a.kv_data_ptrs = [m.array.ptr for m in self.mirrors]
            a.kv_data_mem_kinds = ["VRAM"] * len(self.bufs)
            a.gpu_id = self.gpu
        a.kv_data_lens = [nbytes(b) for b in self.bufs]
        a.kv_item_lens = [nbytes(b[0]) * self.page_size for b in self.bufs]
        a.aux_data_ptrs = [self.output_ids.data_ptr(), self.rooms.data_ptr()]
        a.aux_data_lens = [nbytes(self.output_ids), nbytes(self.rooms)]
        a.aux_item_lens = [nbytes(self.output_ids[0]), nbytes(self.rooms[0])]
        a.state_data_ptrs = []
        a.kv_head_num, a.total_kv_head_num = heads, total_heads
        a.page_size, a.system_dp_rank, a.pp_rank = self.page_size, 0, stage
        a.prefill_start_layer = self.layer_ids[0]  # a pipeline stage's first layer
        a.prefill_end_layer = self.layer_ids[-1] + 1
        return a

    def token_locs(self, pages: list[int], n_tokens: int):
        return [pages[t // self.page_size] * self.page_size + t % self.page_size
                for t in range(n_tokens)]


def _expected(torch, pool, buf: int, tokens, first_head, n_heads, seed):
    n = len(pool.layer_ids)
    layer, kv = (buf, 0) if pool.mla else (buf % n, buf // n)
    layer = pool.layer_ids[layer]  # the global layer: a pipeline stage holds some only
    if pool.mla:
        return pattern(torch, layer, kv, tokens, 0, 1, LATENT, seed, pool.bufs[buf].dtype)
    return pattern(torch, layer, kv, tokens, first_head, n_heads, HEAD_DIM, seed,
                   pool.bufs[buf].dtype)


def _manager(cfg, mode: str):
    import torch

    from pdkv.integrations.sglang import install
    from pdkv.integrations.sglang.install import takeover_name
    install()  # what `python -m pdkv.integrations.sglang.launch_server` does, first
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import (DisaggregationMode, KVClassType,
                                                 TransferBackend, get_kv_class)
    from sglang.srt.server_args import ServerArgs
    backend = TransferBackend(takeover_name())  # --disaggregation-transfer-backend nixl
    host, port = cfg["addr"].split(":")
    server_args = ServerArgs(host=host, disaggregation_bootstrap_port=int(port),
                             disaggregation_mode=mode, tp_size=cfg["tp"],
                             disaggregation_transfer_backend=backend.value,
                             pp_size=cfg.get("pp", 1) if "stage" in cfg else 1)
    first_head, n_heads = heads_of(cfg["rank"], cfg["tp"], cfg["heads"])
    pool = Pool(torch, cfg["mla"], 1 if cfg["mla"] else n_heads, cfg["page_size"],
                cfg.get("layer_ids"))
    if cfg.get("device"):
        pool.to_device(cfg["rank"] % 2)
    args = pool.kv_args(get_kv_class(backend, KVClassType.KVARGS), cfg["rank"],
                        1 if cfg["mla"] else n_heads, 1 if cfg["mla"] else cfg["heads"],
                        cfg.get("stage", 0))
    assert isinstance(args, KVArgs)
    mgr = get_kv_class(backend, KVClassType.MANAGER)(
        args, DisaggregationMode(mode), server_args, cfg["mla"])
    mgr.register_to_bootstrap()
    return torch, pool, mgr, backend, first_head, n_heads


def _poll_until(obj, states, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = obj.poll()
        if s in states:
            return s
        time.sleep(0.005)
    return obj.poll()


def prefill_main(cfg, out_q, in_q):
    """cfg: rank, tp, heads, mla, page_size, addr, requests=[(room, tokens, seed)],
    chunk_pages, hang (never send: a prefill stuck in its forward)."""
    torch, pool, mgr, backend, first_head, n_heads = _manager(cfg, "prefill")
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.utils import KVClassType, get_kv_class, kv_to_page_indices
    Sender = get_kv_class(backend, KVClassType.SENDER)
    out_q.put(("ready", cfg["name"]))
    senders, next_page = {}, 1
    for k, (room, n_tokens, seed) in enumerate(cfg["requests"]):
        s = Sender(mgr, cfg["addr"], room, dest_tp_ranks=[0], pp_rank=cfg.get("stage", 0))
        n_pages = -(-n_tokens // pool.page_size)
        pages = list(range(next_page + n_pages - 1, next_page - 1, -1))  # reversed: any order
        next_page += n_pages
        senders[room] = (s, pages, n_tokens, seed, k)
    outcome = {}
    for room, (s, pages, n_tokens, seed, aux) in senders.items():
        state = _poll_until(s, (KVPoll.WaitingForInput, KVPoll.Failed), 30)
        assert state == KVPoll.WaitingForInput, f"room {room} never bootstrapped: {state}"
        s.init(len(pages), aux)
        if cfg.get("hang"):
            out_q.put(("in_forward", cfg["name"]))
            wait_stop(in_q, 120)
        locs = torch.tensor(pool.token_locs(pages, n_tokens))
        for b, buf in enumerate(pool.bufs):  # the forward's KV write
            buf[locs] = _expected(torch, pool, b, range(n_tokens), first_head, n_heads, seed)
        pool.upload()  # the forward ran on the GPU; sglang reads its results before sending
        kv_indices = np.array(pool.token_locs(pages, n_tokens), dtype=np.int64)
        page_indices = kv_to_page_indices(kv_indices, pool.page_size)
        chunks = [page_indices[i:i + cfg["chunk_pages"]]
                  for i in range(0, len(page_indices), cfg["chunk_pages"])]
        for i, chunk in enumerate(chunks):
            if i == len(chunks) - 1:  # sglang's MetadataBuffers.set_buf before the last send
                last_stage = cfg.get("stage", 0) == cfg.get("pp", 1) - 1
                # Only the last pipeline stage sampled: another stage's row must not land.
                pool.output_ids[aux, 0] = 1000 + room % 1000 if last_stage else 7
                pool.rooms[aux, 0] = room if last_stage else 7
            s.send(chunk)
    for room, (s, *_rest) in senders.items():
        state = _poll_until(s, (KVPoll.Success, KVPoll.Failed), 30)
        metric = s.get_transfer_metric()
        outcome[room] = (int(state), metric.transfer_latency_s, metric.transfer_total_bytes)
    out_q.put(("done", cfg["name"], {"outcome": outcome}))
    wait_stop(in_q)
    mgr.shutdown()


def decode_main(cfg, out_q, in_q):
    """cfg: rank, tp, heads, mla, page_size, addr, requests=[(room, tokens, seed)]."""
    torch, pool, mgr, backend, first_head, n_heads = _manager(cfg, "decode")
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.utils import KVClassType, get_kv_class
    Receiver = get_kv_class(backend, KVClassType.RECEIVER)
    out_q.put(("ready", cfg["name"]))
    # sglang's decode asks for the prefill's parallel info (1 s apart) before a receiver.
    deadline = time.monotonic() + 30
    while not mgr.try_ensure_parallel_info(cfg["addr"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    receivers, next_page = {}, 3
    for k, (room, n_tokens, seed) in enumerate(cfg["requests"]):
        r = Receiver(mgr, cfg["addr"], room)
        r.init(prefill_dp_rank=0)
        n_pages = -(-n_tokens // pool.page_size)
        pages = list(range(next_page, next_page + 2 * n_pages, 2))  # every other page
        next_page += 2 * n_pages
        receivers[room] = (r, pages, n_tokens, seed, AUX_ROWS - 1 - k)
    for room, (r, pages, n_tokens, seed, aux) in receivers.items():
        state = _poll_until(r, (KVPoll.WaitingForInput, KVPoll.Failed), 30)
        assert state == KVPoll.WaitingForInput, f"room {room} never bootstrapped: {state}"
        r.send_metadata(np.array(pages, dtype=np.int32), aux_index=aux)
    out_q.put(("waiting", cfg["name"]))
    outcome, when = {}, {}
    for room, (r, pages, n_tokens, seed, aux) in receivers.items():
        state = _poll_until(r, (KVPoll.Success, KVPoll.Failed), cfg.get("timeout", 30))
        when[room] = time.time()
        reason = None
        if state == KVPoll.Failed:
            try:
                r.failure_exception()
            except Exception as e:  # noqa: BLE001 - sglang catches broadly too
                reason = f"{type(e).__name__}: {e}"
        pool.download()
        locs = torch.tensor(pool.token_locs(pages, n_tokens))
        bytes_ok = all(torch.equal(buf[locs], _expected(torch, pool, b, range(n_tokens),
                                                         first_head, n_heads, seed))
                       for b, buf in enumerate(pool.bufs))
        meta_ok = (int(pool.output_ids[aux, 0]) == 1000 + room % 1000 and
                   int(pool.rooms[aux, 0]) == room)
        outcome[room] = {"state": int(state), "reason": reason, "bytes_ok": bytes_ok,
                         "meta_ok": meta_ok}
    out_q.put(("done", cfg["name"], {"outcome": outcome, "when": when}))
    wait_stop(in_q)
    mgr.shutdown()
