"""KV managers end to end with KV pools in (fake) CUDA memory on both sides.

Each rank's KV buffers are FakeCudaArrays handed to KVArgs as DLPack tensors (lengths
omitted: taken from the tensors); aux and state stay in host memory beside them. The
fake's device memory faults on any CPU touch, so a success here means the bytes moved
through the driver's copies (tcp stages them through pinned host slabs). The decode's
bytes are checked after downloading its device pools: a pool pdkv did not write holds
zeros and fails the check. The checksum runs on both sides (it reads device memory
through a staged copy)."""
import pytest

import pdkv
from fake_cuda_array import fake_cuda_env
from kv_harness import Cluster, Shape
from test_kv_e2e import assert_all_succeeded

ENV = dict(fake_cuda_env(), PDKV_VERIFY_CHECKSUM="1")


def run(shape, **kw):
    with Cluster(pdkv, shape, device_kv=True, env=ENV, **kw) as c:
        done = c.start().run()
        assert_all_succeeded(done)
        return done


@pytest.mark.parametrize("p_tp,d_tp,mla", [(1, 1, False), (1, 2, False), (2, 1, False),
                                           (1, 2, True)])
def test_device_pools_on_both_sides(p_tp, d_tp, mla):
    shape = Shape(mla=mla, heads=1 if mla else 4)
    run(shape, p_tp=p_tp, d_tp=d_tp, rooms=(11, 12), pages=6)


def test_chunked_prefill_with_host_aux_and_state_beside_device_kv():
    done = run(Shape(), rooms=(30, 31), pages=12, chunks=3, aux=True, state_slots=1,
               token=1000)
    assert done[("decode", 0)]["meta"][30] == (1030, [30, 7])


def test_layerwise_forward_streams_device_layers():
    # The simulated forward writes each layer on the host and uploads it before marking it
    # ready: a layer pdkv read before its mark would carry zeros.
    run(Shape(), p_tp=1, d_tp=2, rooms=(40, 41), pages=6, layerwise_interval=1, forward_ms=20,
        aux=True)
