"""The hybrid model disaggregated (real prefill/decode processes, pdkv moving the KV pages
and the recurrent state slot) must give the tokens of the same model run colocated, and
must not when the state is left behind."""
import numpy as np
import pytest

from disagg_hybrid import run_hybrid_disaggregated
from hybrid_model import HybridModel, hybrid_colocated_generate

PROMPT = np.random.default_rng(3).integers(0, 256, 30)  # 30: a partial last page
STEPS, PAGE = 10, 4


@pytest.mark.parametrize("chunk", [None, 8], ids=["whole", "chunked"])
def test_hybrid_disaggregated_tokens_equal_colocated(chunk):
    expected = hybrid_colocated_generate(HybridModel(), PROMPT, STEPS, PAGE)
    run = run_hybrid_disaggregated(PROMPT, STEPS, PAGE, chunk)
    assert run["tokens"] == expected
    # The decode's slot holds, byte for byte, what the prefill's slot held when it sent.
    assert run["decode"][0]["state_digest"] == run["prefill"]["state_digest"]
    assert run["prefill"]["state_bytes"] > 0
    if chunk:
        assert run["prefill"]["chunks"] >= 3


def test_state_left_behind_is_caught():
    """The KV pages move but the state slot does not: the decode starts from an empty
    state, its tokens differ, and the colocated check reports it."""
    expected = hybrid_colocated_generate(HybridModel(), PROMPT, STEPS, PAGE)
    run = run_hybrid_disaggregated(PROMPT, STEPS, PAGE, 8, send_state=False)
    assert run["decode"][0]["state_digest"] != run["prefill"]["state_digest"]
    assert run["tokens"] != expected
