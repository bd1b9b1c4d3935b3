"""The disaggregated run of the tiny model: a prefill process and 1 or 2 decode processes,
pdkv moving the real KV cache between them through a bootstrap server in this process.

Prefill (TP 1) computes the prompt's KV into shuffled pages and sends them (in chunks if
asked, the chunk that completes the page count being the last) with a KVSender; the first
sampled token travels as prefill metadata. Each decode rank receives its KV-head slice into
pages from a shuffled free list with a KVReceiver.
- decode TP 1: the decode process itself generates the tokens from the received pages.
- decode TP 2: each decode process receives and returns its head slice; this coordinator
  puts both slices into two rank caches and generates with them (the model's attention
  concatenates the heads of both ranks). The decode ranks do not run the forward jointly.
"""
from __future__ import annotations

import multiprocessing as mp
import time
import traceback

import numpy as np

from pdkv.testing import (FAST_TIMEOUTS, apply_settings, kv_args_from_buffers, shuffled_pages,
                          wait_terminal)
from tiny_model import PagedKVCache, TinyModel

CTX = mp.get_context("spawn")
ROOM = 7


def kv_args(cache: PagedKVCache, rank: int, tp: int, **fields):
    """The rank's paged K/V buffers (float32, one page per item) as KVArgs; `fields` adds
    others (the hybrid model's state buffers)."""
    return kv_args_from_buffers(
        cache.buffers, engine_rank=rank, tp_size=tp, page_size=cache.page_size,
        layer_buffers=cache.layer_buffers, kv_head_num=cache.head_end - cache.head_begin,
        total_kv_head_num=cache.cfg.kv_heads, head_dim=cache.cfg.head_dim, dtype_bytes=4,
        page_layout="NHD", is_mla=False, **fields)


def pool_pages(n_needed: int) -> int:
    """Pages per buffer of a rank: twice what the request needs, so its pages scatter."""
    return 2 * n_needed + 8


def free_pages(seed: int, n: int) -> np.ndarray:
    """n pages from a shuffled (fragmented) free list."""
    return shuffled_pages(pool_pages(n), seed)[:n].astype(np.int64)


def raise_if_failed(obj, pdkv, state, side):
    if state != pdkv.KVPoll.Success:
        try:
            obj.failure_exception()
        except pdkv.KVTransferError as e:
            raise RuntimeError(f"{side}: transfer failed: {e}") from e
        raise RuntimeError(f"{side}: transfer ended in state {state!r}")


def prefill_main(addr, prompt, page_size, chunk, results):
    try:
        import pdkv
        model = TinyModel()
        n_pages = -(-len(prompt) // page_size)
        cache = PagedKVCache(model.cfg, pool_pages(n_pages), page_size)
        pages = free_pages(101, n_pages)
        mgr = pdkv.KVManager(kv_args(cache, 0, 1), "prefill", addr)
        sender = pdkv.KVSender(mgr, addr, ROOM)
        sender.init(n_pages)
        chunk = chunk or len(prompt)
        sent, logits, n_chunks = 0, None, 0
        for start in range(0, len(prompt), chunk):
            logits = model.forward(prompt[start:start + chunk], start, [cache], [pages])
            end = min(start + chunk, len(prompt))
            last = end == len(prompt)
            # A chunk sends the pages it completed (the last one also its partial page).
            upto = n_pages if last else end // page_size
            if last:  # the first token is known now; it rides with the KV
                mgr.set_prefill_metadata(ROOM, int(np.argmax(logits)))
            sender.send(pages[sent:upto])
            sent, n_chunks = upto, n_chunks + 1
        state = wait_terminal(sender, 30.0)
        raise_if_failed(sender, pdkv, state, "prefill")
        results.put(("prefill", {"chunks": n_chunks, "pages": n_pages}))
        mgr.shutdown()
    except Exception:
        results.put(("error", "prefill:\n" + traceback.format_exc()))


def decode_main(addr, prompt_len, steps, page_size, rank, tp, results):
    try:
        import pdkv
        model = TinyModel()
        n_prompt_pages = -(-prompt_len // page_size)
        n_pages = -(-(prompt_len + steps) // page_size)
        cache = PagedKVCache(model.cfg, pool_pages(n_pages), page_size, rank, tp)
        pages = free_pages(202 + rank, n_pages)  # prompt pages first, then room to grow
        mgr = pdkv.KVManager(kv_args(cache, rank, tp), "decode", addr)
        receiver = pdkv.KVReceiver(mgr, addr, ROOM)
        receiver.init()
        receiver.send_metadata(pages[:n_prompt_pages])
        state = wait_terminal(receiver, 30.0)
        raise_if_failed(receiver, pdkv, state, f"decode rank {rank}")
        first, _ = receiver.prefill_metadata()
        out = {"rank": rank, "first": int(first), "pages": pages.tolist()}
        if tp == 1:
            out["tokens"] = model.decode(int(first), prompt_len, steps, [cache], [pages])
        else:  # hand the head slice to the coordinator
            out["slice"] = [cache.read(l, pages, prompt_len) for l in range(model.cfg.layers)]
            out["heads"] = (cache.head_begin, cache.head_end)
        results.put(("decode", out))
        mgr.shutdown()
    except Exception:
        results.put(("error", f"decode rank {rank}:\n" + traceback.format_exc()))


def run_processes(prefill, decodes: list, timeout: float = 90.0) -> tuple[dict, list[dict]]:
    """Starts the prefill and decode processes around a bootstrap server in this process.

    `prefill` and each of `decodes` are (target, args): the process runs
    target(bootstrap_addr, *args, results) and puts ("prefill" | "decode", result) or
    ("error", traceback) on `results`. Returns the prefill's result and the decodes' in
    rank order; raises on an error or when the time runs out, ending every process."""
    # Short timeouts (a broken run fails in seconds, not minutes); a PDKV_* the user set wins.
    apply_settings(FAST_TIMEOUTS, override=False)
    import pdkv
    with pdkv.BootstrapServer("127.0.0.1", 0) as server:
        addr = f"127.0.0.1:{server.port}"
        results = CTX.Queue()
        procs = [CTX.Process(target=target, args=(addr, *args, results))
                 for target, args in [prefill, *decodes]]
        for p in procs:
            p.start()
        got, decoded = None, []
        deadline = time.monotonic() + timeout
        try:
            while len(decoded) < len(decodes) or got is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("disaggregated run did not finish in time")
                kind, payload = results.get(timeout=left)
                if kind == "error":
                    raise RuntimeError(payload)
                if kind == "decode":
                    decoded.append(payload)
                else:
                    got = payload
        finally:
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.kill()
    return got, sorted(decoded, key=lambda d: d["rank"])


def run_disaggregated(prompt: np.ndarray, steps: int, page_size: int = 4, tp_decode: int = 1,
                      chunk: int | None = None, timeout: float = 90.0) -> dict:
    """Returns {"tokens", "prefill", "decode"} of one disaggregated generation."""
    prompt = np.asarray(prompt, np.int64)
    prefill, decodes = run_processes(
        (prefill_main, (prompt, page_size, chunk)),
        [(decode_main, (len(prompt), steps, page_size, r, tp_decode)) for r in range(tp_decode)],
        timeout)
    if tp_decode == 1:
        tokens = decodes[0]["tokens"]
    else:
        tokens = _generate_from_slices(decodes, len(prompt), steps, page_size, tp_decode)
    return {"tokens": tokens, "prefill": prefill, "decode": decodes}


def _generate_from_slices(decodes, prompt_len, steps, page_size, tp):
    """The coordinator's half of decode TP 2: one rank cache per received head slice."""
    model = TinyModel()
    n_pages = -(-(prompt_len + steps) // page_size)
    caches = [PagedKVCache(model.cfg, n_pages, page_size, d["rank"], tp) for d in decodes]
    pages = [np.arange(n_pages)] * tp
    positions = np.arange(prompt_len)
    for cache, d in zip(caches, decodes):
        for layer, (k, v) in enumerate(d["slice"]):
            cache.k[layer][positions // page_size, positions % page_size] = k
            cache.v[layer][positions // page_size, positions % page_size] = v
    firsts = {d["first"] for d in decodes}
    if len(firsts) != 1:
        raise RuntimeError(f"decode ranks disagree on the first token: {firsts}")
    return model.decode(firsts.pop(), prompt_len, steps, caches, pages)
