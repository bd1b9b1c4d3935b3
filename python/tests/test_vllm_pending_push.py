"""vLLM's has_pending_push_work: the engine core stops stepping once no request is left to
schedule unless the scheduler connector says push work is pending (upstream
Scheduler.has_requests). pdkv's whole-prompt chunk and finished_sending need steps after
the request's last forward, so the hook must be true exactly until every room of the
instance has been reported finished, and the replay (which stops stepping the same way)
must still deliver every byte."""
import pytest

from engine_replay import use_standins

use_standins()
torch = pytest.importorskip("torch")

from vllm_cluster import assert_delivered, run_prefill_then_decode  # noqa: E402
from vllm_objects import scheduler_output  # noqa: E402


def _connector(role_name: str, layerwise=False):
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from pdkv.integrations.vllm import PdkvConnector
    ktc = KVTransferConfig(kv_connector="PdkvConnector", kv_role=role_name,
                           kv_connector_extra_config={"bootstrap_addr": "h:1",
                                                      "layerwise": layerwise,
                                                      # the prefill's, named by requests
                                                      "trusted_bootstrap_addrs": ["p:1"]})
    return PdkvConnector(VllmConfig(ktc, CacheConfig(4), ModelConfig(4)),
                         KVConnectorRole.SCHEDULER, None)


def _empty_output():
    return scheduler_output()


def test_prefill_push_work_is_pending_until_every_room_is_reported_finished():
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request, RequestStatus
    s = _connector("kv_producer")
    assert s.has_pending_push_work() is False
    r = Request("r", list(range(10)), {"do_remote_decode": True})
    s.update_state_after_alloc(r, KVCacheBlocks(([7, 3, 9],)), 0)
    assert s.has_pending_push_work()  # a room is open
    s.build_connector_meta(_empty_output())
    r.status = RequestStatus.FINISHED_LENGTH_CAPPED
    delay, params = s.request_finished(r, ([7, 3, 9],))
    assert delay and params["pdkv_num_blocks"] == 3
    # the last forward is done; the whole-prompt chunk still waits for the next step
    assert s.has_pending_push_work()
    meta = s.build_connector_meta(_empty_output())
    assert [c.blocks for c in meta.sends] == [[7, 3, 9]]
    assert s.has_pending_push_work()  # pushed, not reported finished yet
    s.update_connector_output(KVConnectorOutput(finished_sending=None))
    assert s.has_pending_push_work()
    s.update_connector_output(KVConnectorOutput(finished_sending={"r"}))
    assert s.has_pending_push_work() is False
    # A request that ends without a hand-off: the abort goes out on the next step, and
    # then nothing is pending (its room is dropped, not reported by the workers).
    r2 = Request("r2", list(range(6)), {"do_remote_decode": True})
    s.update_state_after_alloc(r2, KVCacheBlocks(([5, 6],)), 0)
    r2.status = RequestStatus.FINISHED_ABORTED
    assert s.request_finished(r2, ([5, 6],)) == (False, None)
    assert s.has_pending_push_work()
    assert [(c.open, c.abort) for c in s.build_connector_meta(_empty_output()).sends] == \
        [(True, False), (False, True)]  # opened and failed in the same step
    assert s.has_pending_push_work() is False


def test_decode_load_aborted_mid_flight_is_pending_until_its_blocks_are_released():
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request, RequestStatus
    s = _connector("kv_consumer")
    params = {"do_remote_prefill": True, "pdkv_room": 77, "pdkv_bootstrap_addr": "p:1"}
    r = Request("d", list(range(8)), dict(params))
    assert s.get_num_new_matched_tokens(r, 0) == (8, True)
    s.update_state_after_alloc(r, KVCacheBlocks(([1, 2],)), 8)
    s.build_connector_meta(_empty_output())
    assert s.has_pending_push_work() is False  # loading: vLLM counts it unfinished anyway
    r.status = RequestStatus.FINISHED_ABORTED
    assert s.request_finished(r, ([1, 2],)) == (True, None)  # blocks held
    assert s.has_pending_push_work()
    s.build_connector_meta(_empty_output())
    assert s.has_pending_push_work()  # until the workers report the room ended
    # ... in finished_recving, where vLLM frees the blocks of a finished request's load
    s.update_connector_output(KVConnectorOutput(finished_recving={"d"}))
    assert s.has_pending_push_work() is False


def test_worker_connector_has_no_push_work_of_its_own():
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from pdkv.integrations.vllm import PdkvConnector
    ktc = KVTransferConfig(kv_connector="PdkvConnector", kv_role="kv_producer",
                           kv_connector_extra_config={"bootstrap_addr": "h:1"})
    worker = PdkvConnector(VllmConfig(ktc, CacheConfig(4), ModelConfig(4)),
                           KVConnectorRole.WORKER, None)
    assert worker.has_pending_push_work() is False


def test_engine_loop_that_stops_when_idle_still_completes_every_whole_prompt_push():
    # Whole-prompt push (no layerwise): every byte leaves after the last forward, in steps
    # only has_pending_push_work keeps running. Caches in vLLM's CPU backend layout
    # (2, blocks, heads, block_size, dim), unpermuted.
    requests = [("cpu-a", 19, 7, None), ("cpu-b", 8, 8, None)]
    done, _ = run_prefill_then_decode(1, 1, "CPU", 2, requests, chunk=8)
    assert_delivered(done, requests, 1, 1)
    assert done["p0"]["idle_steps"] > 0, "the push should have needed steps after the forward"
    assert done["p0"]["pending_push_work"] is False
