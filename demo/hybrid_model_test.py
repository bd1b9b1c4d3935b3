"""The demo's hybrid model (demo/hybrid_model.py) on its own, before any transfer: it is
deterministic, chunking does not change it, and its recurrent state really carries the
prompt (so a disaggregated run that loses the state cannot still produce its tokens)."""
import numpy as np

from hybrid_model import (ATTENTION, RECURRENT, HybridConfig, HybridModel, StatePool,
                          hybrid_colocated_generate)
from tiny_model import PagedKVCache

PROMPT = np.random.default_rng(5).integers(0, 256, 30)
STEPS, PAGE = 10, 4


def prefilled(model, pool_slots=2, slot=1):
    """A cache and state pool after the prompt; returns (first token, cache, pages, pool)."""
    n = -(-(len(PROMPT) + STEPS) // PAGE)
    cache = PagedKVCache(model.kv_config, n, PAGE)
    pages = np.arange(n)
    pool = StatePool(model.cfg, pool_slots)
    first = model.prefill(PROMPT, cache, pages, pool.request(slot))
    return first, cache, pages, pool


def test_has_both_layer_kinds_and_is_deterministic_and_not_constant():
    cfg = HybridConfig()
    assert cfg.layer_ids(ATTENTION) and cfg.layer_ids(RECURRENT)
    a = hybrid_colocated_generate(HybridModel(), PROMPT, STEPS, PAGE)
    assert a == hybrid_colocated_generate(HybridModel(), PROMPT, STEPS, PAGE)
    assert len(set(a)) > 1


def test_chunked_prefill_matches_whole_prompt():
    model = HybridModel()
    assert hybrid_colocated_generate(model, PROMPT, STEPS, PAGE, chunk=8) == \
        hybrid_colocated_generate(model, PROMPT, STEPS, PAGE)


def test_state_lives_in_its_slot_of_the_registered_buffers():
    model = HybridModel()
    _, _, _, pool = prefilled(model, pool_slots=3, slot=1)
    assert len(pool.buffers) == len(pool.layer_ids) == 2 * len(model.cfg.layer_ids(RECURRENT))
    for buf in pool.buffers:
        assert np.any(buf[1] != 0)  # the prompt went into slot 1 ...
        assert not np.any(buf[0]) and not np.any(buf[2])  # ... and nowhere else
    assert pool.slot_bytes() == sum(b[0].nbytes for b in pool.buffers)


def test_decoding_needs_the_state_after_exactly_the_prompt():
    model = HybridModel()
    expected = hybrid_colocated_generate(model, PROMPT, STEPS, PAGE)
    first, cache, pages, pool = prefilled(model)
    assert model.decode(first, len(PROMPT), STEPS, cache, pages, pool.request(1)) == expected

    # An empty state with the right KV pages (the state was not moved): other tokens.
    first, cache, pages, pool = prefilled(model)
    for buf in pool.buffers:
        buf[1] = 0
    assert model.decode(first, len(PROMPT), STEPS, cache, pages, pool.request(1)) != expected

    # Recomputing the last prompt token over the state after all of it folds that token
    # in twice, and the generation drifts (why the decode continues from the first token).
    first, cache, pages, pool = prefilled(model)
    logits = model.forward(PROMPT[-1:], len(PROMPT) - 1, cache, pages, pool.request(1))
    again = int(np.argmax(logits))
    assert model.decode(again, len(PROMPT), STEPS, cache, pages, pool.request(1)) != expected
