"""Hybrid vLLM instances replayed around PdkvConnector across real processes.

A rank process plays one vLLM worker plus its instance's scheduler, in vLLM's call order
for a connector that supports its hybrid KV cache manager (SupportsHMA): on_new_request
when a request arrives, get_num_new_matched_tokens / update_state_after_alloc with one
block list per KV cache group, build_connector_meta, the worker step
(vllm_engine_model.model_runner_step), request_finished_all_groups once the prompt is
done (after the sliding-window manager freed the blocks before its window), then steps
while the connector has push work. The model is vllm_hybrid_model's.
"""
from __future__ import annotations

import time

from engine_replay import block_allocator, wait_stop
from pdkv.testing import heads_of
from vllm_engine_model import model_runner_step
from vllm_hybrid_model import (allocate, check, free_out_of_window, kv_cache_config,
                               make_caches, write)
from vllm_objects import new_request, scheduler_output


def _connectors(torch, cfg, role: str, engine_id: str, heads: int):
    import importlib

    from vllm.config import (CacheConfig, KVTransferConfig, ModelConfig, ParallelConfig,
                             VllmConfig)
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.parallel_state import set_tensor_model_parallel
    set_tensor_model_parallel(cfg["rank"], cfg["tp"])
    config = VllmConfig(
        kv_transfer_config=KVTransferConfig(
            kv_connector="PdkvConnector", kv_connector_module_path="pdkv.integrations.vllm",
            kv_role=role, engine_id=engine_id,
            kv_connector_extra_config={"bootstrap_addr": cfg["addr"], **cfg.get("extra", {})}),
        cache_config=CacheConfig(block_size=cfg["block_size"]),
        model_config=ModelConfig(total_num_kv_heads=cfg["heads"],
                                 use_mla=cfg["family"] == "mla_indexer"),
        parallel_config=ParallelConfig(tensor_parallel_size=cfg["tp"]))
    kcc = kv_cache_config(torch, cfg["family"], heads, cfg["block_size"], cfg["tp"])
    ktc = config.kv_transfer_config
    cls = getattr(importlib.import_module(ktc.kv_connector_module_path), ktc.kv_connector)
    return (cls(config, KVConnectorRole.SCHEDULER, kcc),
            cls(config, KVConnectorRole.WORKER, kcc))


def _on_device(cfg, caches):
    """With cfg["device"]: the caches as CUDA tensors over fake device memory (one mirror
    per allocation, every layer's view of it a FakeCudaTensor into the same device
    bytes), and the mirrors; else the caches as they are and no mirrors. The replay
    uploads the model's writes before the push and downloads what landed before checking."""
    if not cfg.get("device"):
        return caches, []
    from fake_cuda_tensor import DeviceMirror, FakeCudaTensor

    from pdkv.integrations import cuda_sync
    cuda_sync.current_stream = lambda device: None  # the replay uploads before each push
    cuda_sync.synchronize_current_stream = lambda device: None
    mirrors, out = {}, {}

    def device_view(t):
        key = t.storage().data_ptr()
        if key not in mirrors:
            mirrors[key] = DeviceMirror(t, cfg["rank"] % 2)
        return FakeCudaTensor(t, mirrors[key])
    for name, value in caches.items():
        out[name] = [device_view(t) for t in value] if isinstance(value, list) else \
            device_view(value)
    return out, list(mirrors.values())


def _rank(torch, cfg, role, engine_id):
    first, n = heads_of(cfg["rank"], cfg["tp"], cfg["heads"])
    if cfg["family"] == "mla_indexer":
        first, n = 0, 1
    sched, worker = _connectors(torch, cfg, role, engine_id, n)
    caches = make_caches(torch, cfg["family"], n, cfg["block_size"], cfg["tp"])
    registered, mirrors = _on_device(cfg, caches)
    worker.register_kv_caches(registered)
    return sched, worker, caches, first, n, mirrors


def _drain(sched, worker, finished, until, deadline):
    """Steps (no forward) while `until()` is false; returns every request reported."""
    from vllm.v1.outputs import KVConnectorOutput
    sent, recvd = set(), set()
    while not until(sent, recvd) and time.monotonic() < deadline:
        meta = sched.build_connector_meta(scheduler_output(finished=finished))
        sending, recving, _ = model_runner_step(worker, meta, finished=finished)
        finished = set()
        sched.update_connector_output(KVConnectorOutput(sending, recving))
        sent |= sending or set()
        recvd |= recving or set()
        time.sleep(0.01)
    return sent, recvd


def prefill_main(cfg, out_q, in_q):
    """cfg: family, rank, tp, heads, block_size, requests=[(id, prompt tokens, seed)]."""
    import torch

    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request, RequestStatus

    sched, worker, caches, first, n, mirrors = _rank(torch, cfg, "kv_producer", "prefill")
    bs, family = cfg["block_size"], cfg["family"]
    alloc = block_allocator(5, 48)
    out_q.put(("ready", cfg["name"]))
    finished = set()
    for req_id, n_tokens, seed in cfg["requests"]:
        r = Request(req_id, list(range(n_tokens)), {"do_remote_decode": True})
        sched.on_new_request(r)  # a Mamba model's prefill loses the last prompt token
        assert sched.get_num_new_matched_tokens(r, 0) == (0, False)
        tokens = r.num_prompt_tokens
        per_group = allocate(alloc, family, bs, tokens)
        sched.update_state_after_alloc(r, KVCacheBlocks(tuple(per_group)), 0)
        meta = sched.build_connector_meta(scheduler_output(
            [new_request(req_id, tuple(per_group))], None, {req_id: tokens}))
        write(torch, caches, family, per_group, bs, tokens, first, n, seed, cfg["rank"],
              cfg["tp"])
        for m in mirrors:  # the forward's writes are on the device before the push
            m.upload()
        model_runner_step(worker, meta, finished=finished)
        finished = set()
        per_group = free_out_of_window(caches, family, per_group, bs, tokens)
        for m in mirrors:  # the freed blocks' new owner writes them on the device
            m.upload()
        r.status = RequestStatus.FINISHED_LENGTH_CAPPED
        delay, params = sched.request_finished_all_groups(r, tuple(per_group))
        assert delay, "prefill must keep its blocks until the push ends"
        finished.add(req_id)
        if cfg["rank"] == 0:
            out_q.put(("params", req_id, params))
    ids = {r[0] for r in cfg["requests"]}
    sent, _ = _drain(sched, worker, finished, lambda s, _: ids <= s,
                     time.monotonic() + cfg.get("timeout", 30))
    out_q.put(("done", cfg["name"], {"finished_sending": sorted(sent),
                                     "failures": dict(worker._worker.failures),
                                     "pending_push_work": sched.has_pending_push_work()}))
    wait_stop(in_q)
    worker.shutdown()


def decode_main(cfg, out_q, in_q):
    """cfg: family, rank, tp, heads, block_size. Inbox: ("req", id, prompt tokens, seed,
    params) then ("go",)."""
    import torch

    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request

    sched, worker, caches, first, n, mirrors = _rank(torch, cfg, "kv_consumer", "decode")
    bs, family = cfg["block_size"], cfg["family"]
    alloc = block_allocator(9, 48)
    out_q.put(("ready", cfg["name"]))
    reqs = {}
    while True:
        msg = in_q.get(timeout=60)
        if msg[0] == "go":
            break
        _, req_id, n_tokens, seed, params = msg
        r = Request(req_id, list(range(n_tokens)), dict(params))
        count, is_async = sched.get_num_new_matched_tokens(r, 0)
        assert is_async and count > 0, (count, is_async)
        per_group = allocate(alloc, family, bs, count)
        sched.update_state_after_alloc(r, KVCacheBlocks(tuple(per_group)), count)
        reqs[req_id] = (seed, per_group, count)
    _, recvd = _drain(sched, worker, set(), lambda _, r: set(reqs) <= r,
                      time.monotonic() + cfg.get("timeout", 30))
    for m in mirrors:  # what pdkv landed on the device, for the checks
        m.download()
    ok = {req_id: check(torch, caches, family, per_group, bs, count, first, n, seed,
                        cfg["rank"], cfg["tp"])
          for req_id, (seed, per_group, count) in reqs.items()}
    out_q.put(("done", cfg["name"], {"finished_recving": sorted(recvd), "bytes_ok": ok,
                                     "loaded_tokens": {k: v[2] for k, v in reqs.items()},
                                     "load_errors": sorted(worker.get_block_ids_with_load_errors()),
                                     "failures": dict(worker._worker.failures)}))
    wait_stop(in_q)
    worker.shutdown()
