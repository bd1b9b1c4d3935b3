"""PdkvConnector with CUDA KV caches (fake driver) across real processes.

The connector sees each layer's cache as a CUDA tensor (FakeCudaTensor over fake device
memory); the replayed model writes a CPU copy whose bytes reach the device only when the
connector synchronises the cache's stream, as a GPU forward's writes are only certain
after a stream synchronisation. So a push the connector did not order after the model's
writes carries zeros, and the decode, whose cache bytes are read back from its device
memory, reports wrong bytes. TP 1->2 (head slices) layerwise with a decode prefix, TP
2->1 HND whole-prompt push, MLA."""
import pytest

torch = pytest.importorskip("torch")  # imported once here; the forked ranks inherit it
from fake_cuda_array import fake_cuda_env  # noqa: E402
from vllm_cluster import assert_delivered, run_prefill_then_decode  # noqa: E402

REQUESTS = [("req-a", 22, 1, None), ("req-b", 9, 2, None)]
ENV = dict(fake_cuda_env(), PDKV_VERIFY_CHECKSUM="1")


def _run(p_tp, d_tp, layout, **kw):
    done, params = run_prefill_then_decode(p_tp, d_tp, layout, 1 if layout == "MLA" else 4,
                                           REQUESTS, device=True, env=ENV, **kw)
    assert_delivered(done, REQUESTS, p_tp, d_tp)
    for r in range(p_tp):
        syncs = done[f"p{r}"]["syncs"]
        assert syncs and set(syncs) == {r % 2}, f"p{r} synchronised {syncs}"
    return done


def test_tp1_to_tp2_layerwise_device_caches_with_decode_prefix():
    _run(1, 2, "NHD", chunk=8, extra_p={"layerwise": True}, prefix_blocks={"req-a": 2})


def test_tp2_to_tp1_hnd_whole_prompt_push_device_caches():
    _run(2, 1, "HND", chunk=6)


def test_mla_device_caches():
    _run(1, 1, "MLA", chunk=8)
