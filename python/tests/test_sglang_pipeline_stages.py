"""Pipeline parallelism through pdkv's sglang classes, across real processes: each prefill
pipeline stage is its own group of processes holding its own layers (an uneven split, so
the decode must place each stage at its layer offset), the bootstrap server keeps one
table per stage, and the decode waits for every stage before the room is Success. Every
KV byte of every layer is checked, and the metadata row comes from the last stage only
(the other stages write another row, which must not land)."""
import pytest

torch = pytest.importorskip("torch")  # imported once here; the forked ranks inherit it
import pdkv  # noqa: E402
from engine_replay import Ranks, use_standins  # noqa: E402
from sglang_replay import decode_main, prefill_main  # noqa: E402

use_standins()
from sglang.srt.disaggregation.base.conn import KVArgs  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

from pdkv.integrations.sglang.kvargs import kv_args_and_state  # noqa: E402
from pdkv.integrations.sglang.pipeline import stage_layer_counts, stage_view  # noqa: E402

SUCCESS = int(pdkv.KVPoll.Success)
REQUESTS = [(301, 21, 1), (302, 8, 2)]
SPLIT = [[0, 1], [2]]  # three layers over two stages, as an uneven partition leaves them


def _run(p_tp, d_tp, heads, mla, decode_stages, device=False, env=None):
    base = dict(heads=heads, mla=mla, page_size=4, requests=REQUESTS, chunk_pages=2,
                device=device, env=env, pp=len(SPLIT))
    every_layer = [layer for stage in SPLIT for layer in stage]
    with Ranks() as ranks:
        for s, layers in enumerate(SPLIT):
            for r in range(p_tp):
                ranks.start(f"p{s}.{r}", prefill_main,
                            dict(base, rank=r, tp=p_tp, stage=s, layer_ids=layers))
        decodes = []
        for s, layers in enumerate(SPLIT if decode_stages else [every_layer]):
            for r in range(d_tp):
                stage = dict(stage=s, layer_ids=layers) if decode_stages else \
                    dict(layer_ids=layers)
                name = f"d{s}.{r}"
                ranks.start(name, decode_main, dict(base, rank=r, tp=d_tp, **stage))
                decodes.append((name, not decode_stages or s == len(SPLIT) - 1))
        ranks.serve_bootstrap()
        ranks.expect("ready", len(SPLIT) * p_tp + len(decodes))
        done = {m[1]: m[2] for m in ranks.expect("done", len(SPLIT) * p_tp + len(decodes))}
    for s in range(len(SPLIT)):
        for r in range(p_tp):
            for room, (state, _, total) in done[f"p{s}.{r}"]["outcome"].items():
                assert state == SUCCESS and total > 0, (s, r, room)
    for name, last_stage in decodes:
        for room, o in done[name]["outcome"].items():
            assert o["state"] == SUCCESS, (name, room, o["reason"])
            assert o["bytes_ok"], f"decode {name} room {room}: wrong KV bytes"
            if last_stage:  # the row the last prefill stage wrote, not another stage's
                assert o["meta_ok"], f"decode {name} room {room}: wrong metadata row"


@pytest.mark.parametrize("p_tp,d_tp,heads,mla", [(1, 1, 4, False), (2, 1, 4, False),
                                                 (1, 2, 4, False), (1, 1, 1, True)])
def test_decode_of_one_stage_receives_every_prefill_stage(p_tp, d_tp, heads, mla):
    _run(p_tp, d_tp, heads, mla, decode_stages=False)


@pytest.mark.parametrize("p_tp,d_tp", [(1, 1), (2, 1)])
def test_decode_stages_receive_from_the_same_prefill_stage(p_tp, d_tp):
    _run(p_tp, d_tp, 4, False, decode_stages=True)


def test_device_pools_of_stages_land_every_byte():
    """KV pools in (fake) CUDA memory on every stage and the decode, checksums on."""
    from fake_cuda_array import fake_cuda_env
    env = dict(fake_cuda_env(), PDKV_VERIFY_CHECKSUM="1")
    _run(1, 1, 4, False, decode_stages=False, device=True, env=env)


def _sglang_args(layers: int, mla: bool):
    a = KVArgs()
    n = layers if mla else 2 * layers
    a.engine_rank, a.page_size, a.pp_rank = 0, 4, 0
    a.kv_data_ptrs, a.kv_data_lens = [0x1000 * (i + 1) for i in range(n)], [64] * n
    a.kv_item_lens = [64] * n
    a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens = [0x90000], [64], [8]
    return a


def test_a_stage_view_holds_its_layers_at_their_offset():
    a = _sglang_args(3, mla=False)  # K0 K1 K2 V0 V1 V2
    view = stage_view(a, 1, 2, is_mla=False, keep_aux=False)
    assert view.kv_data_ptrs == [a.kv_data_ptrs[i] for i in (1, 2, 4, 5)]
    assert view.aux_data_ptrs == [] and a.aux_data_ptrs == [0x90000]
    assert stage_view(a, 2, 1, is_mla=False, keep_aux=True).aux_data_ptrs == [0x90000]
    m = _sglang_args(3, mla=True)
    assert stage_view(m, 2, 1, is_mla=True, keep_aux=True).kv_data_ptrs == [m.kv_data_ptrs[2]]
    with pytest.raises(RuntimeError, match="same model"):
        stage_view(a, 2, 2, is_mla=False, keep_aux=True)
    assert stage_layer_counts([4, 2], is_mla=False) == [2, 1]
    with pytest.raises(RuntimeError, match="whole number"):
        stage_layer_counts([3], is_mla=False)


def test_what_upstream_refuses_is_refused_with_the_reason():
    a = _sglang_args(2, mla=True)
    a.dcp_size = 2
    with pytest.raises(ValueError, match="dcp_size 1 only"):
        kv_args_and_state(a, ServerArgs(), True, "prefill")
    a.dcp_size = 1
    with pytest.raises(ValueError, match="decode's attn_cp_size must be 1"):
        kv_args_and_state(a, _with(ServerArgs(), attn_cp_size=2), True, "decode")
    with pytest.raises(ValueError, match="attn_cp_size 1 only on a prefill"):
        kv_args_and_state(a, _with(ServerArgs(), attn_cp_size=2), True, "prefill")


def _with(obj, **fields):
    for k, v in fields.items():
        setattr(obj, k, v)
    return obj
