import numpy as np
import pytest

from tiny_model import ModelConfig, PagedKVCache, TinyModel, colocated_generate


def test_generation_is_deterministic_and_not_constant():
    model = TinyModel()
    prompt = np.random.default_rng(0).integers(0, 256, 40)
    a = colocated_generate(model, prompt, 12, page_size=4)
    b = colocated_generate(TinyModel(), prompt, 12, page_size=4)
    assert a == b
    assert len(set(a)) > 1


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_shuffled_pages_and_tp_split_give_the_same_tokens(page_size):
    model = TinyModel()
    prompt = np.random.default_rng(1).integers(0, 256, 37)
    steps = 8
    expected = colocated_generate(model, prompt, steps, page_size)
    n = (len(prompt) + steps + page_size - 1) // page_size
    caches = [PagedKVCache(model.cfg, 3 * n, page_size, r, 2) for r in range(2)]
    rng = np.random.default_rng(2)
    pages = [rng.permutation(3 * n)[:n] for _ in range(2)]
    first = model.prefill(prompt, caches, pages)
    assert model.decode(first, len(prompt), steps, caches, pages) == expected


def test_chunked_prefill_matches_whole_prompt():
    model = TinyModel()
    prompt = np.random.default_rng(3).integers(0, 256, 50)
    assert colocated_generate(model, prompt, 10, 4, chunk=16) == colocated_generate(
        model, prompt, 10, 4)


def test_tp_size_must_divide_heads():
    with pytest.raises(ValueError):
        PagedKVCache(ModelConfig(), 4, 4, 0, 3)
