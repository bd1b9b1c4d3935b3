"""The disaggregated run of the hybrid model (demo/hybrid_model.py): a prefill process and
one decode process, pdkv moving the attention layers' KV pages *and* the recurrent layers'
per-request state between them.

Both sides register their KV pages as KV buffers and their StatePool as state buffers
(item = one request's slot, state_layer_ids naming each buffer's model layer). The
prefill gives its slot with the last send(..., state_indices=[slot]); the decode gives its
own (a different slot, as an engine's allocator would) in send_metadata(...,
state_indices=[slot]), and pdkv copies the slot's bytes of every state buffer.

Which state the decode needs. A KV page can be recomputed harmlessly (writing a token's
K/V again stores the same bytes), but the recurrent state cannot: each token is folded
into it, so running a token twice yields a different state. Two consistent hand-overs
exist: (a) vLLM's, where the decode recomputes the last prompt token, so the prefill must
consume only N-1 prompt tokens and hand over the state after them; (b) sglang's, where
the prefill consumes all N tokens, samples the first token and hands over the state after
N, and the decode continues from that first token without recomputing anything. The demo
takes (b): it is the contract the dense demo already uses (the first token rides as
prefill metadata), and the decode's first step is then exactly the colocated run's.
"""
from __future__ import annotations

import hashlib
import traceback

import numpy as np

from disagg import ROOM, free_pages, kv_args, pool_pages, raise_if_failed, run_processes
from hybrid_model import ATTENTION, HybridModel, StatePool
from pdkv.testing import wait_terminal
from tiny_model import PagedKVCache

STATE_SLOTS = 4       # requests a side's state pool holds
PREFILL_SLOT = 2      # the slot each side's allocator gave this request: different on
DECODE_SLOT = 1       # purpose, so a copy to the wrong slot cannot pass


def slot_digest(pool: StatePool, slot: int) -> str:
    """sha256 of one request's state bytes in every state buffer, to compare both sides."""
    h = hashlib.sha256()
    for buf in pool.buffers:
        h.update(buf[slot].tobytes())
    return h.hexdigest()


def hybrid_kv_args(model: HybridModel, cache: PagedKVCache, pool: StatePool):
    return kv_args(cache, 0, 1, state=pool.buffers,
                   kv_layer_ids=model.cfg.layer_ids(ATTENTION), state_layer_ids=pool.layer_ids)


def prefill_main(addr, prompt, page_size, chunk, send_state, results):
    try:
        import pdkv
        model = HybridModel()
        n_pages = -(-len(prompt) // page_size)
        cache = PagedKVCache(model.kv_config, pool_pages(n_pages), page_size)
        pool = StatePool(model.cfg, STATE_SLOTS)
        pages = free_pages(101, n_pages)
        mgr = pdkv.KVManager(hybrid_kv_args(model, cache, pool), "prefill", addr)
        sender = pdkv.KVSender(mgr, addr, ROOM)
        sender.init(n_pages)
        state = pool.request(PREFILL_SLOT)
        chunk = chunk or len(prompt)
        sent, n_chunks = 0, 0
        for start in range(0, len(prompt), chunk):
            logits = model.forward(prompt[start:start + chunk], start, cache, pages, state)
            end = min(start + chunk, len(prompt))
            last = end == len(prompt)
            upto = n_pages if last else end // page_size
            slots = None
            if last:
                # The state is final only after the last chunk, so its slot goes with the
                # last send (an earlier one would hand over a half-consumed prompt).
                mgr.set_prefill_metadata(ROOM, int(np.argmax(logits)))
                # send_state=False is the tests' way to prove the check catches a state
                # left behind: the decode then starts from an empty state.
                slots = [PREFILL_SLOT] if send_state else None
            if last:
                sent_digest = slot_digest(pool, PREFILL_SLOT)
            sender.send(pages[sent:upto], state_indices=slots)
            sent, n_chunks = upto, n_chunks + 1
        raise_if_failed(sender, pdkv, wait_terminal(sender, 30.0), "prefill")
        results.put(("prefill", {"chunks": n_chunks, "pages": n_pages,
                                 "state_bytes": pool.slot_bytes() if send_state else 0,
                                 "state_digest": sent_digest}))
        mgr.shutdown()
    except Exception:
        results.put(("error", "prefill:\n" + traceback.format_exc()))


def decode_main(addr, prompt_len, steps, page_size, results):
    try:
        import pdkv
        model = HybridModel()
        n_prompt_pages = -(-prompt_len // page_size)
        n_pages = -(-(prompt_len + steps) // page_size)
        cache = PagedKVCache(model.kv_config, pool_pages(n_pages), page_size)
        pool = StatePool(model.cfg, STATE_SLOTS)
        pages = free_pages(202, n_pages)
        mgr = pdkv.KVManager(hybrid_kv_args(model, cache, pool), "decode", addr)
        receiver = pdkv.KVReceiver(mgr, addr, ROOM)
        receiver.init()
        receiver.send_metadata(pages[:n_prompt_pages], state_indices=[DECODE_SLOT])
        raise_if_failed(receiver, pdkv, wait_terminal(receiver, 30.0), "decode rank 0")
        first, _ = receiver.prefill_metadata()
        received_digest = slot_digest(pool, DECODE_SLOT)
        state = pool.request(DECODE_SLOT)
        # Continue from the first token over the moved KV and state (hand-over (b) above).
        tokens = model.decode(int(first), prompt_len, steps, cache, pages, state)
        results.put(("decode", {"rank": 0, "first": int(first), "pages": pages.tolist(),
                                "tokens": tokens, "state_digest": received_digest}))
        mgr.shutdown()
    except Exception:
        results.put(("error", "decode rank 0:\n" + traceback.format_exc()))


def run_hybrid_disaggregated(prompt: np.ndarray, steps: int, page_size: int = 4,
                             chunk: int | None = None, timeout: float = 90.0,
                             send_state: bool = True) -> dict:
    """Returns {"tokens", "prefill", "decode"} of one disaggregated hybrid generation.
    send_state=False (tests only) leaves the recurrent state behind on the prefill."""
    prompt = np.asarray(prompt, np.int64)
    prefill, decodes = run_processes(
        (prefill_main, (prompt, page_size, chunk, send_state)),
        [(decode_main, (len(prompt), steps, page_size))], timeout)
    return {"tokens": decodes[0]["tokens"], "prefill": prefill, "decode": decodes}

