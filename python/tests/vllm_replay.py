"""vLLM instances replayed around PdkvConnector, in vLLM's call order.

A rank process plays one vLLM worker plus (a copy of) its instance's scheduler: the
scheduler side is deterministic, so every rank builds the same metadata, as vLLM's single
scheduler would broadcast it. Per step: get_num_new_matched_tokens /
update_state_after_alloc for requests from the waiting queue (new, or resumed after a
preemption with new blocks), build_connector_meta (pickled, as it crosses processes),
then the worker step in the model runner's order (vllm_engine_model.model_runner_step),
update_connector_output with the scheduler's own bookkeeping of the reports
(SchedulerLedger: a report naming a request it already freed kills vLLM), and
request_finished when a prompt is done. KV caches are real CPU tensors in the layout
vLLM's attention backend allocates. Preemption as vLLM does it: the blocks are freed
(poisoned here, as the request that gets them next would write them), the request
starts over from the waiting queue.

The loop stops as vLLM's engine core does: once no request is left to schedule and the
scheduler connector's has_pending_push_work() is false (Scheduler.has_requests), so a
push that needs steps after the last forward must be announced by that hook.
"""
from __future__ import annotations

import ctypes
import time

from engine_replay import block_allocator, pattern, wait_stop
from pdkv.testing import heads_of
from vllm_engine_model import SchedulerLedger, model_runner_step
from vllm_objects import cached_requests, new_request, scheduler_output

LAYERS, HEAD_DIM, LATENT, NUM_BLOCKS = 3, 8, 16, 64
SENTINEL = 77.0  # prefix blocks the decode already holds: must stay untouched
POISON = 99.0  # blocks a preemption freed, as the next request to hold them writes them


def make_caches(torch, layout: str, heads: int, block_size: int):
    """{layer name: tensor} as vLLM allocates them for this backend layout."""
    caches = {}
    for layer in range(LAYERS):
        name = f"model.layers.{layer}.self_attn.attn"
        if layout == "NHD":
            t = torch.zeros(2, NUM_BLOCKS, block_size, heads, HEAD_DIM, dtype=torch.float16)
        elif layout == "HND":  # physical (2, blocks, heads, tokens, dim), logical NHD
            t = torch.zeros(2, NUM_BLOCKS, heads, block_size, HEAD_DIM,
                            dtype=torch.float16).permute(0, 1, 3, 2, 4)
        elif layout == "CPU":  # vLLM's CPU_ATTN: logical (2, blocks, heads, tokens, dim)
            t = torch.zeros(2, NUM_BLOCKS, heads, block_size, HEAD_DIM, dtype=torch.float16)
        elif layout == "MLA":
            t = torch.zeros(NUM_BLOCKS, block_size, LATENT, dtype=torch.bfloat16)
        else:
            raise ValueError(layout)
        caches[name] = t
    return caches


def on_device(cfg, caches):
    """With cfg["device"]: the caches as the connector sees CUDA caches (FakeCudaTensor
    over fake device memory on GPU rank % 2), their mirrors, and a count of the
    connector's stream synchronisations, each of which lands the model's writes on the
    device (so a push before one sends stale bytes). Else the caches as they are."""
    if not cfg.get("device"):
        return caches, None, None
    from fake_cuda_tensor import DeviceMirror

    from pdkv.integrations import cuda_sync
    mirrors = {name: DeviceMirror(t, cfg["rank"] % 2) for name, t in caches.items()}
    syncs, streams = [], {}

    def synchronize(device):
        syncs.append(device)
        for m in mirrors.values():
            m.upload()

    def current_stream(device):
        # The model's writes so far, queued on its stream behind 50 ms of "compute": a
        # push that does not wait for the stream on the device copies stale bytes.
        from fake_cuda_array import FakeCudaStream
        syncs.append(device)
        # One "model stream" per device, as a model has; it keeps the host buffers its
        # queued copies read.
        if device not in streams:
            streams[device] = FakeCudaStream(device)
        stream = streams[device]
        stream.sleep(50)
        for m in mirrors.values():
            stream.upload(m.array, ctypes.string_at(m.base, m.nbytes))
        return stream
    cuda_sync.synchronize_current_stream = synchronize
    cuda_sync.current_stream = current_stream
    return {name: m.tensor() for name, m in mirrors.items()}, mirrors, syncs


def poison_blocks(caches, layout, blocks) -> None:
    for cache in caches.values():
        if layout == "MLA":
            cache[blocks] = POISON
        else:
            cache[:, blocks] = POISON


def _token_view(cache, layout):
    """(2, blocks, tokens, heads, dim) view of a K/V cache (CPU_ATTN's is heads-first)."""
    return cache.permute(0, 1, 3, 2, 4) if layout == "CPU" else cache


def _token_slots(blocks, block_size, tokens):
    return [(blocks[t // block_size], t % block_size) for t in tokens]


def write_kv(torch, cache, layout, layer, blocks, block_size, tokens, first_head, n_heads,
             seed):
    """The forward's KV write of these tokens for one layer (what the engine computes)."""
    cache = _token_view(cache, layout)
    slots = _token_slots(blocks, block_size, tokens)
    b = torch.tensor([s[0] for s in slots])
    o = torch.tensor([s[1] for s in slots])
    if layout == "MLA":
        cache[b, o] = pattern(torch, layer, 0, tokens, 0, 1, LATENT, seed, cache.dtype)[:, 0]
        return
    for kv in (0, 1):
        cache[kv, b, o] = pattern(torch, layer, kv, tokens, first_head, n_heads, HEAD_DIM,
                                  seed, cache.dtype)


def check_kv(torch, cache, layout, layer, blocks, block_size, tokens, first_head, n_heads,
             seed) -> bool:
    cache = _token_view(cache, layout)
    slots = _token_slots(blocks, block_size, tokens)
    b = torch.tensor([s[0] for s in slots])
    o = torch.tensor([s[1] for s in slots])
    if layout == "MLA":
        want = pattern(torch, layer, 0, tokens, 0, 1, LATENT, seed, cache.dtype)[:, 0]
        return bool(torch.equal(cache[b, o], want))
    return all(torch.equal(cache[kv, b, o], pattern(torch, layer, kv, tokens, first_head,
                                                    n_heads, HEAD_DIM, seed, cache.dtype))
               for kv in (0, 1))


def _config(cfg, role: str, engine_id: str):
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
    extra = {"bootstrap_addr": cfg["addr"], **cfg.get("extra", {})}
    return VllmConfig(
        kv_transfer_config=KVTransferConfig(
            kv_connector="PdkvConnector", kv_connector_module_path="pdkv.integrations.vllm",
            kv_role=role, engine_id=engine_id, kv_connector_extra_config=extra),
        cache_config=CacheConfig(block_size=cfg["block_size"]),
        model_config=ModelConfig(total_num_kv_heads=cfg["heads"],
                                 use_mla=cfg["layout"] == "MLA"))


def _connectors(cfg, role: str, engine_id: str):
    """(scheduler connector, worker connector) built through vLLM's factory path."""
    import importlib

    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.parallel_state import set_tensor_model_parallel
    set_tensor_model_parallel(cfg["rank"], cfg["tp"])
    config = _config(cfg, role, engine_id)
    ktc = config.kv_transfer_config
    cls = getattr(importlib.import_module(ktc.kv_connector_module_path), ktc.kv_connector)
    return (cls(config, KVConnectorRole.SCHEDULER, None),
            cls(config, KVConnectorRole.WORKER, None))


def _rank(torch, cfg, role: str, engine_id: str):
    """A rank's connectors and its KV caches (its TP rank's heads; MLA's one latent head),
    registered with the worker: (scheduler connector, worker connector, first head, number
    of heads, caches, on_device's mirrors and syncs)."""
    sched, worker = _connectors(cfg, role, engine_id)
    first_head, n_heads = heads_of(cfg["rank"], cfg["tp"], cfg["heads"])
    layout = cfg["layout"]
    caches = make_caches(torch, layout, 1 if layout == "MLA" else n_heads, cfg["block_size"])
    registered, mirrors, syncs = on_device(cfg, caches)
    worker.register_kv_caches(registered)
    return sched, worker, first_head, n_heads, caches, mirrors, syncs


def _step(worker, meta, on_layer=None, finished=frozenset()):
    """One engine step on the worker side, in the model runner's order (pdkv's loads are
    asynchronous, so start_load_kv follows the forward); returns the finished pair."""
    sending, recving, _ = model_runner_step(worker, meta, on_layer, finished)
    return sending, recving


def prefill_main(cfg, out_q, in_q):
    """cfg: rank, tp, heads, layout, block_size, addr, extra, requests=[(id, tokens, seed,
    room or None)], chunk (tokens per step), hang_in_forward (stop after layer 0)."""
    import torch

    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request, RequestStatus

    sched, worker, first_head, n_heads, caches, _, syncs = _rank(
        torch, cfg, "kv_producer", "prefill-instance")
    bs, layout = cfg["block_size"], cfg["layout"]
    alloc = block_allocator(11, NUM_BLOCKS)
    reqs, seeds, blocks = {}, {}, {}
    for req_id, n_tokens, seed, room in cfg["requests"]:
        params = {"do_remote_decode": True}
        if room is not None:
            params["pdkv_room"] = room
        reqs[req_id] = Request(req_id, list(range(n_tokens)), params)
        seeds[req_id] = seed
    out_q.put(("ready", cfg["name"]))

    ledger = SchedulerLedger(sched)
    for r in reqs.values():
        ledger.add(r)
    just_finished, sending_done = set(), set()  # finished since the last step; all sent
    preempt_at = dict(cfg.get("preempt", {}))  # req id -> step that preempts it
    fill_preempted = cfg.get("fill_preempted_req_ids", True)
    schedulable = (RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PREEMPTED)
    step = 0
    while any(r.status in schedulable for r in reqs.values()):
        preempted = set()
        for req_id, at in list(preempt_at.items()):
            if at == step and reqs[req_id].status == RequestStatus.RUNNING:
                # vLLM's preemption: the blocks go back to the pool (another request
                # rewrites them: poisoned here) and the request waits to start over.
                del preempt_at[req_id]
                r = reqs[req_id]
                r.status, r.num_computed_tokens = RequestStatus.PREEMPTED, 0
                poison_blocks(caches, layout, blocks.pop(req_id))
                preempted.add(req_id)
        new, resumed, cached_ids, cached_blocks, cached_computed = [], set(), [], [], []
        scheduled = {}
        for req_id, r in reqs.items():
            if r.status not in schedulable or req_id in preempted:
                continue
            n = min(cfg["chunk"], r.num_prompt_tokens - r.num_computed_tokens)
            scheduled[req_id] = n
            need = -(-(r.num_computed_tokens + n) // bs) - len(blocks.get(req_id, []))
            fresh = alloc(need)
            if r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                # from the waiting queue, first time or resumed: the connector is asked
                # again and told of the (new) blocks
                assert sched.get_num_new_matched_tokens(r, 0) == (0, False)
                blocks[req_id] = fresh
                sched.update_state_after_alloc(r, KVCacheBlocks((list(fresh),)), 0)
                if r.status == RequestStatus.WAITING:
                    new.append(new_request(req_id, (list(fresh),), 0))
                else:
                    resumed.add(req_id)
                    cached_ids.append(req_id)
                    cached_blocks.append((list(fresh),))
                    cached_computed.append(0)
                r.status = RequestStatus.RUNNING
            else:
                blocks[req_id] += fresh
                cached_ids.append(req_id)
                cached_blocks.append((fresh,) if fresh else None)
                cached_computed.append(r.num_computed_tokens)
        so = scheduler_output(new, cached_requests(cached_ids, cached_blocks, cached_computed,
                                                   resumed),
                              scheduled, just_finished,
                              preempted if fill_preempted else None)
        meta = sched.build_connector_meta(so)

        def forward(layer, name):
            if cfg.get("hang_in_forward") and layer == 1:
                out_q.put(("in_forward", cfg["name"]))
                cfg["hang_in_forward"] = False
                # a long forward: the test kills us, or lets us go on ("resume")
                msg = in_q.get(timeout=120)
                assert msg[0] == "resume", msg
            for req_id, n in scheduled.items():
                r = reqs[req_id]
                write_kv(torch, caches[name], layout, layer, blocks[req_id], bs,
                         range(r.num_computed_tokens, r.num_computed_tokens + n),
                         first_head, n_heads, seeds[req_id])

        sending, recving = _step(worker, meta, forward, just_finished)
        just_finished = set()
        ledger.apply(KVConnectorOutput(sending, recving))
        sending_done |= sending or set()
        step += 1
        for req_id, n in scheduled.items():
            r = reqs[req_id]
            r.num_computed_tokens += n
            if r.num_computed_tokens == r.num_prompt_tokens:
                # max_tokens=1: the prompt's step samples the only token
                delay, params = ledger.finish(r, RequestStatus.FINISHED_LENGTH_CAPPED,
                                              (list(blocks[req_id]),))
                assert delay, "prefill must keep its blocks until the push ends"
                just_finished.add(req_id)
                if cfg["rank"] == 0:
                    out_q.put(("params", req_id, params))
    # Nothing left to schedule: vLLM steps on only while the connector has push work.
    deadline = time.monotonic() + cfg.get("timeout", 30)
    idle_steps = 0
    while sched.has_pending_push_work() and time.monotonic() < deadline:
        meta = sched.build_connector_meta(scheduler_output(finished=just_finished))
        sending, recving = _step(worker, meta, None, just_finished)
        just_finished = set()
        ledger.apply(KVConnectorOutput(sending, recving))
        sending_done |= sending or set()
        idle_steps += 1
        time.sleep(0.01)
    stats = worker.get_kv_connector_stats()
    out_q.put(("done", cfg["name"], {"finished_sending": sorted(sending_done),
                                     "unfreed": sorted(ledger.requests),
                                     "failures": dict(worker._worker.failures),
                                     "stats": stats.reduce() if stats else None,
                                     "stats_data": dict(stats.data) if stats else None,
                                     "pending_push_work": sched.has_pending_push_work(),
                                     "idle_steps": idle_steps,
                                     "syncs": syncs,
                                     "active": worker._worker.mgr.active_rooms()}))
    wait_stop(in_q)
    worker.shutdown()


def _report_landed_layers(torch, cfg, caches, layout, reqs, first_head, n_heads, landed,
                          out_q) -> None:
    """("landed", rank, layer) once every request's bytes of that layer are in place."""
    bs = cfg["block_size"]
    for layer, name in enumerate(caches):
        if layer in landed:
            continue
        if all(check_kv(torch, caches[name], layout, layer, blocks, bs,
                        range(prefix * bs, r.num_prompt_tokens), first_head, n_heads, seed)
               for r, seed, blocks, prefix in reqs.values()):
            landed.add(layer)
            out_q.put(("landed", cfg["name"], layer))


def decode_main(cfg, out_q, in_q):
    """cfg: rank, tp, heads, layout, block_size, addr, extra; async_scheduling,
    abort_after_recv (a request the client ends right after its load was reported),
    watch_layers (report each layer once it landed). Inbox: ("req", id, tokens, seed,
    params, prefix_blocks) then ("go",); ("abort", id) ends a request."""
    import torch

    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request, RequestStatus

    sched, worker, first_head, n_heads, caches, mirrors, _ = _rank(
        torch, cfg, "kv_consumer", "decode-instance")
    bs, layout = cfg["block_size"], cfg["layout"]
    alloc = block_allocator(23 + cfg["rank"] * 0, NUM_BLOCKS)
    out_q.put(("ready", cfg["name"]))
    reqs = {}
    while True:
        msg = in_q.get(timeout=60)
        if msg[0] == "go":
            break
        _, req_id, n_tokens, seed, params, prefix_blocks = msg
        r = Request(req_id, list(range(n_tokens)), dict(params))
        local = prefix_blocks * bs
        count, is_async = sched.get_num_new_matched_tokens(r, local)
        assert is_async and count == n_tokens - local, (count, is_async)
        blocks = alloc(-(-n_tokens // bs))
        for name, cache in caches.items():  # the prefix this decode already holds
            if layout == "MLA":
                cache[blocks[:prefix_blocks]] = SENTINEL
            else:
                cache[:, blocks[:prefix_blocks]] = SENTINEL
        sched.update_state_after_alloc(r, KVCacheBlocks((blocks,)), count)
        reqs[req_id] = (r, seed, blocks, prefix_blocks)
    for m in (mirrors or {}).values():  # the prefix the decode holds is on its GPU
        m.upload()
    ledger = SchedulerLedger(sched)
    for r, *_ in reqs.values():
        r.status = RequestStatus.WAITING_FOR_REMOTE_KVS
        ledger.add(r)
    # async_scheduling: the scheduler takes a step's output only after it scheduled the
    # next step (vLLM's asynchronous scheduling), so a request it ends in between may
    # already be reported by the workers.
    lag = 1 if cfg.get("async_scheduling") else 0
    unapplied: list = []
    t0 = time.time()
    recvd, errors, times, held, aborted = set(), set(), {}, set(), set()
    reports: dict[str, list[str]] = {}  # req id -> every report naming it, in order
    just_finished, landed = set(), set()
    deadline = time.monotonic() + cfg.get("timeout", 30)

    def waiting():
        return [i for i, r in ledger.requests.items()
                if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS and i not in ledger.ready]

    # Loading requests wait for remote KVs (vLLM counts them unfinished); aborted ones are
    # finished, so only has_pending_push_work keeps the loop stepping for them.
    while (waiting() or sched.has_pending_push_work() or unapplied) and \
            time.monotonic() < deadline:
        ends = [in_q.get()[1]] if not in_q.empty() else []  # the client went away
        if cfg.get("abort_at_go"):  # ... before any step ran
            ends.append(cfg.pop("abort_at_go"))
        if cfg.get("abort_after_recv") in recvd:  # ... just as its load ended
            ends.append(cfg.pop("abort_after_recv"))
        for req_id in ends:
            r = reqs[req_id][0]
            delay, _ = ledger.finish(r, RequestStatus.FINISHED_ABORTED, (reqs[req_id][2],))
            aborted.add(req_id)
            just_finished.add(req_id)
            if delay:
                held.add(req_id)
        meta = sched.build_connector_meta(scheduler_output(finished=just_finished))
        sending, recving, invalid = model_runner_step(worker, meta, finished=just_finished)
        just_finished = set()
        for kind, ids in (("sending", sending), ("recving", recving)):
            for req_id in ids or ():
                reports.setdefault(req_id, []).append(kind)
        unapplied.append(KVConnectorOutput(sending, recving, invalid_block_ids=invalid))
        while len(unapplied) > lag or (unapplied and not waiting()
                                       and not sched.has_pending_push_work()):
            ledger.apply(unapplied.pop(0))
        errors |= invalid
        for req_id in recving or ():
            times[req_id] = time.time()
        recvd |= recving or set()
        if cfg.get("report_waiting") and not recvd:
            out_q.put(("waiting", cfg["name"]))
            cfg["report_waiting"] = False
        if cfg.get("watch_layers"):
            _report_landed_layers(torch, cfg, caches, layout, reqs, first_head, n_heads,
                                  landed, out_q)
        time.sleep(0.01)
    for m in (mirrors or {}).values():  # what pdkv landed on the GPU, for the checks
        m.download()
    bytes_ok, prefix_ok = {}, {}
    for req_id, (r, seed, blocks, prefix_blocks) in reqs.items():
        if req_id in aborted:
            continue
        tokens = range(prefix_blocks * bs, r.num_prompt_tokens)
        bytes_ok[req_id] = all(
            check_kv(torch, caches[name], layout, layer, blocks, bs, tokens, first_head,
                     n_heads, seed) for layer, name in enumerate(caches))
        prefix = blocks[:prefix_blocks]
        prefix_ok[req_id] = all(
            bool((c[prefix] if layout == "MLA" else c[:, prefix]).eq(SENTINEL).all())
            for c in caches.values())
    stats = worker.get_kv_connector_stats()
    out_q.put(("done", cfg["name"], {
        "finished_recving": sorted(recvd), "load_errors": sorted(errors),
        "held": sorted(held), "aborted": sorted(aborted), "reports": reports,
        "freed": list(ledger.freed), "unfreed": sorted(ledger.requests),
        "finished_sending": sorted(i for i, k in reports.items() if "sending" in k),
        "blocks": {k: v[2][v[3]:] for k, v in reqs.items()}, "bytes_ok": bytes_ok,
        "prefix_ok": prefix_ok, "failures": dict(worker._worker.failures),
        "recv_time": times, "start_time": t0, "stats": stats.reduce() if stats else None,
        "stats_data": dict(stats.data) if stats else None,
        "pending_push_work": sched.has_pending_push_work(),
        "active": worker._worker.mgr.active_rooms()}))
    wait_stop(in_q)
    worker.shutdown()
