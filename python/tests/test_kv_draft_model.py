"""Speculative decoding's draft model across real processes: KV layers
from `target_layer_num` on belong to the draft, whose head count and head size differ from
the target's. Every byte of target and draft layers lands on the decode, with heterogeneous
TP slicing each model by its own heads; a decode whose draft differs is refused."""
import pytest

import pdkv
from kv_harness import Cluster, Shape
from test_kv_e2e import FAILED, assert_all_succeeded

# Target: 2 layers of 4 KV heads x 8; draft: 1 layer of 2 KV heads x 16 (item sizes differ).
DRAFT = dict(layers=2, heads=4, head_dim=8, draft_layers=1, draft_heads=2, draft_head_dim=16)


@pytest.mark.parametrize("p_tp,d_tp", [(1, 1), (2, 1), (1, 2), (2, 4), (4, 2)])
def test_target_and_draft_layers_land_with_their_own_geometry(p_tp, d_tp):
    with Cluster(pdkv, Shape(**DRAFT), p_tp=p_tp, d_tp=d_tp, rooms=(21, 22), pages=5) as c:
        assert_all_succeeded(c.start().run())


def test_draft_layers_stream_layerwise_with_the_target():
    # The step counter counts draft layers too (a forward runs them): 3 KV layers, 3 steps.
    with Cluster(pdkv, Shape(**DRAFT), p_tp=2, d_tp=1, rooms=(23,), pages=4,
                 layerwise_interval=1, forward_ms=10) as c:
        assert_all_succeeded(c.start().run())


def test_a_decode_with_another_draft_is_refused_with_the_field_named():
    other = Shape(**dict(DRAFT, draft_head_dim=8))
    with Cluster(pdkv, Shape(**DRAFT), rooms=(24,), pages=4, decode_shape=other,
                 env={"PDKV_BOOTSTRAP_TIMEOUT_S": "5"}, timeout=20) as c:
        done = c.start().run(timeout=40)
        decode = done[("decode", 0)]
        assert decode["states"][24] == FAILED
        assert "draft" in decode["reasons"][24], decode["reasons"][24]


def test_draft_fields_are_checked():
    base = dict(kv_data_ptrs=[4096] * 4, kv_data_lens=[64] * 4, kv_item_lens=[16] * 4,
                layer_buffers=[[0, 1], [2, 3]], head_dim=8, dtype_bytes=2)
    mgr_args = pdkv.KVArgs(**base, target_layer_num=3)
    with pytest.raises(ValueError, match="target_layer_num"):
        pdkv.KVManager(mgr_args, "decode", "127.0.0.1:1")
    with pytest.raises(ValueError, match="draft"):
        pdkv.KVManager(pdkv.KVArgs(**base, draft_head_dim=16), "decode", "127.0.0.1:1")
