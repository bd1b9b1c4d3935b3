"""PdkvConnector with vLLM's hybrid KV cache manager on, across real processes: every
KV cache group of a request moves (full attention, sliding window, Mamba state, an
MLA model's indexer cache), in vLLM's block-major hybrid layout and FlashInfer's, with
the decode at another TP size where the family allows it. Every byte of every group and
state slot that should land is checked on every decode rank, in host memory and on
pdkv's fake CUDA device."""
import pytest

torch = pytest.importorskip("torch")  # imported once here; the forked ranks inherit it
from engine_replay import Ranks  # noqa: E402
from fake_cuda_array import fake_cuda_env  # noqa: E402
from vllm_hybrid_model import mamba_env  # noqa: E402
from vllm_hybrid_replay import decode_main, prefill_main  # noqa: E402

REQUESTS = [("req-a", 23, 1), ("req-b", 9, 2)]


def _run(family: str, p_tp: int, d_tp: int, heads: int = 4, block_size: int = 4,
         device: bool = False):
    with Ranks() as ranks:
        env = dict(mamba_env(family))
        if device:
            env.update(fake_cuda_env(), PDKV_VERIFY_CHECKSUM="1")
        base = dict(family=family, heads=heads, block_size=block_size, device=device,
                    env=env or None)
        for r in range(p_tp):
            ranks.start(f"p{r}", prefill_main, dict(base, rank=r, tp=p_tp,
                                                   requests=REQUESTS))
        for r in range(d_tp):
            ranks.start(f"d{r}", decode_main, dict(base, rank=r, tp=d_tp))
        ranks.serve_bootstrap()
        ranks.expect("ready", p_tp + d_tp)
        params = {m[1]: m[2] for m in ranks.expect("params", len(REQUESTS))}
        for req_id, n_tokens, seed in REQUESTS:
            for r in range(d_tp):
                ranks.send(f"d{r}", ("req", req_id, n_tokens, seed, params[req_id]))
        for r in range(d_tp):
            ranks.send(f"d{r}", ("go",))
        done = {m[1]: m[2] for m in ranks.expect("done", p_tp + d_tp)}
    ids = sorted(r[0] for r in REQUESTS)
    for r in range(p_tp):
        assert done[f"p{r}"]["failures"] == {}, done[f"p{r}"]
        assert done[f"p{r}"]["finished_sending"] == ids
        assert done[f"p{r}"]["pending_push_work"] is False
    for r in range(d_tp):
        report = done[f"d{r}"]
        assert report["failures"] == {} and report["load_errors"] == [], report
        assert report["finished_recving"] == ids
        for req_id, layers in report["bytes_ok"].items():
            assert all(layers.values()), f"d{r} {req_id}: wrong bytes in {layers}"
    return done, params


def test_full_and_sliding_window_groups_tp1_to_tp2():
    done, params = _run("swa", 1, 2)
    # the sliding-window group's earlier blocks were freed (poisoned) on the prefill:
    # only the window moved, and the full group moved every page
    assert params["req-a"]["pdkv_num_tokens"] == 23
    assert params["req-a"]["pdkv_num_blocks"] == 6


def test_mamba_hybrid_moves_the_state_after_all_but_the_last_token():
    done, params = _run("mamba", 1, 1)
    # the prefill computed N-1 tokens; the decode loads them and recomputes the last
    assert params["req-a"]["pdkv_num_tokens"] == 22
    assert done["d0"]["loaded_tokens"] == {"req-a": 22, "req-b": 8}


@pytest.mark.parametrize("family,p_tp,d_tp", [
    ("mamba", 1, 2), ("mamba", 2, 1), ("mamba_ds", 1, 2), ("mamba_ds", 2, 1),
    ("gdn", 1, 2), ("gdn", 2, 1), ("mamba_ds", 1, 4), ("gdn", 4, 2)])
def test_mamba_state_split_between_tp_sizes(family, p_tp, d_tp):
    # every decode rank holds its shard of every conv sub-projection and of the temporal
    # state (checked against the sharding rule, per rank), the attention heads sliced
    done, params = _run(family, p_tp, d_tp)
    assert params["req-a"]["pdkv_num_tokens"] == 22
    assert all(done[f"d{r}"]["loaded_tokens"] == {"req-a": 22, "req-b": 8}
               for r in range(d_tp))


def test_flashinfer_layout_tp1_to_tp2_head_sliced():
    _run("flashinfer", 1, 2)


def test_mla_with_indexer_cache_tp1_to_tp2():
    _run("mla_indexer", 1, 2, heads=1)


@pytest.mark.parametrize("family,p_tp,d_tp", [
    ("swa", 1, 2), ("mamba", 1, 1), ("flashinfer", 1, 2), ("mamba", 1, 2),
    ("mamba_ds", 2, 1), ("gdn", 1, 2)])
def test_device_caches(family, p_tp, d_tp):
    _run(family, p_tp, d_tp, device=True)
