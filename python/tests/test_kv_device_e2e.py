"""KV managers end to end with KV pools in (fake) CUDA memory on both sides.

Each rank's KV buffers are FakeCudaArrays handed to KVArgs as DLPack tensors (lengths
omitted: taken from the tensors); aux and state stay in host memory beside them. The
fake's device memory faults on any CPU touch, so a success here means the bytes moved
through the driver's copies (tcp stages them through pinned host slabs). The decode's
bytes are checked after downloading its device pools: a pool pdkv did not write holds
zeros and fails the check. The checksum runs on both sides (it reads device memory
through a staged copy)."""
import time

import pytest

import pdkv
from fake_cuda_array import fake_cuda_env
from kv_harness import Cluster, Shape
from test_kv_e2e import SUCCESS, assert_all_succeeded

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


def test_send_naming_the_forward_stream_waits_for_it_on_the_device():
    # The prefill's "forward" writes the KV on a compute stream after 150 ms of queued
    # work and send() names that stream: pdkv's copies wait for it, so the decode finds
    # the written pages (with the checksum on, it also reads them only after the point).
    run(Shape(), p_tp=1, d_tp=2, rooms=(50, 51), pages=6, chunks=2, stream_forward="named",
        aux=True)


def test_send_without_the_stream_races_the_forward_on_the_fake_device():
    # The control: the same forward, sent without naming its stream (the caller broke the
    # contract). pdkv reads the pages before the stream wrote them, so the decode gets
    # the zeros the pools started with: the test above passes because of the ordering.
    # The stream's queued work is 3 s here, not 150 ms: the unordered send must win the
    # race even on a loaded machine, where reading and sending 6 pages took over 150 ms.
    env = dict(fake_cuda_env())  # no checksum: it would fail the room instead
    with Cluster(pdkv, Shape(), p_tp=1, d_tp=1, rooms=(52,), pages=6, device_kv=True, env=env,
                 stream_forward="unnamed", stream_delay_ms=3000) as c:
        done = c.start().run()
    assert not all(done[("decode", 0)]["bytes_ok"].values()), "the unordered send did not race"



# --- failures with device pools -----------------------------------------------------

FAILED = int(pdkv.KVPoll.Failed)


DEVICE_FAULT = int(pdkv.FailureCause.DeviceFault)


def test_a_sticky_driver_error_fails_every_device_room_of_that_process_at_once():
    # The prefill's fake driver fails its 3rd staging copy with an illegal address, which
    # (as on a GPU) fails its whole CUDA context for good. Every room not yet done fails
    # at once with FailureCause.DeviceFault and the driver's name and description (never
    # waiting for a timeout, never "only that batch");
    # rooms that landed before stay landed; the prefill reports itself unhealthy
    # (pdkv.device_health(), pdkv_device_healthy 0) while the decode stays healthy.
    rooms = tuple(range(60, 68))
    started = time.monotonic()
    with Cluster(pdkv, Shape(), p_tp=1, d_tp=1, rooms=rooms, pages=6, device_kv=True,
                 env=dict(fake_cuda_env(), PDKV_TRANSFER_BATCH_BYTES="4096"),
                 prefill_env={"PDKV_FAKE_CUDA_FAIL_COPY_AFTER": "3"}, timeout=60) as c:
        done = c.start().run(timeout=90)
    elapsed = time.monotonic() - started
    prefill, decode = done[("prefill", 0)], done[("decode", 0)]
    failed = [r for r in rooms if prefill["states"][r] == FAILED]
    assert failed, prefill["states"]
    assert elapsed < 45, f"failing took {elapsed:.1f} s: rooms waited for a timeout"
    for r in failed:
        reason, cause = prefill["reasons"][r], prefill["causes"][r][0]
        assert "CUDA_ERROR_ILLEGAL_ADDRESS" in reason, reason
        assert cause == DEVICE_FAULT, (cause, reason)
        assert decode["states"][r] == FAILED
    for r in set(rooms) - set(failed):
        assert prefill["states"][r] == SUCCESS, prefill["reasons"].get(r)
        assert decode["bytes_ok"][r], f"room {r}: wrong bytes"
    assert prefill["health"]["healthy"] is False
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in prefill["health"]["reason"]
    assert "an illegal memory access was encountered" in prefill["health"]["reason"]
    assert 'pdkv_device_healthy{role="prefill",rank="0"} 0' in prefill["rank_metrics_text"]
    assert decode["health"] == {"healthy": True, "reason": ""}
    assert 'pdkv_device_healthy{role="decode",rank="0"} 1' in decode["rank_metrics_text"]


def test_after_a_sticky_error_new_device_rooms_fail_and_host_rooms_of_other_processes_work():
    # Two prefill DP groups: group 0's driver faults, group 1's is healthy. Every room of
    # group 0 fails (DeviceFault or the fault's own batch), every room of group 1 lands:
    # the fault is one process's, not the cluster's.
    rooms = tuple(range(80, 88))
    with Cluster(pdkv, Shape(), p_dp=2, rooms=rooms, pages=6, device_kv=True,
                 env=dict(fake_cuda_env(), PDKV_TRANSFER_BATCH_BYTES="4096"),
                 prefill_env_by_rank={0: {"PDKV_FAKE_CUDA_FAIL_COPY_AFTER": "1"}},
                 timeout=60) as c:
        done = c.start().run(timeout=90)
    faulted, healthy = done[("prefill", 0)], done[("prefill", 1)]
    assert faulted["health"]["healthy"] is False and healthy["health"]["healthy"] is True
    for r, state in faulted["states"].items():
        assert state == FAILED, (r, faulted["reasons"].get(r))
        assert "CUDA_ERROR_ILLEGAL_ADDRESS" in faulted["reasons"][r]
    for r, state in healthy["states"].items():
        assert state == SUCCESS, (r, healthy["reasons"].get(r))


def test_a_killed_decode_fails_only_its_rooms_with_device_pools():
    # Two decode DP groups with device pools; the one holding room 71 is killed before
    # the transfer starts. Room 70 still lands exactly.
    with Cluster(pdkv, Shape(), d_dp=2, rooms=(70, 71), pages=6, device_kv=True,
                 env=fake_cuda_env(), timeout=15) as c:
        c.start()
        time.sleep(1.0)
        c.kill("decode", 1)
        done = c.run(timeout=30, expect=[("prefill", 0), ("decode", 0)])
    prefill = done[("prefill", 0)]
    assert prefill["states"][71] == FAILED
    assert prefill["causes"][71][0] in (pdkv.FailureCause.PeerDead, pdkv.FailureCause.LinkLost)
    assert prefill["states"][70] == SUCCESS
    assert done[("decode", 0)]["bytes_ok"][70]
