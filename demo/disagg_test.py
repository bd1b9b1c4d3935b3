"""Disaggregated generation (real prefill/decode processes, pdkv between them) must give
the tokens of the same model run colocated."""
import numpy as np
import pytest

from disagg import run_disaggregated
from tiny_model import TinyModel, colocated_generate


@pytest.mark.parametrize("tp_decode,chunk", [(1, None), (2, None), (1, 8), (2, 8)],
                         ids=["tp1-1", "tp1-2", "tp1-1-chunked", "tp1-2-chunked"])
def test_disaggregated_tokens_equal_colocated(tp_decode, chunk):
    prompt = np.random.default_rng(3).integers(0, 256, 30)  # 30: a partial last page
    steps, page = 10, 4
    expected = colocated_generate(TinyModel(), prompt, steps, page)
    run = run_disaggregated(prompt, steps, page, tp_decode, chunk)
    assert run["tokens"] == expected
    assert len(run["decode"]) == tp_decode
    if chunk:
        assert run["prefill"]["chunks"] >= 3
