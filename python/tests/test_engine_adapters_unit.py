"""Engine-adapter pieces that need no second process: vLLM cache layouts -> KVArgs,
request ids -> rooms, settings validation, sglang KVArgs translation, install()."""
import sys
import types

import numpy as np
import pytest

from engine_replay import use_standins

use_standins()
torch = pytest.importorskip("torch")

from pdkv.integrations.rooms import RoomTable, room_hash  # noqa: E402
from pdkv.integrations.settings import TransferSettings  # noqa: E402
from pdkv.integrations.vllm.kv_args import kv_args_from_caches  # noqa: E402
from pdkv.integrations.vllm.layout import RankTopology  # noqa: E402


def test_flash_attn_nhd_cache_maps_to_k_then_v_buffers():
    t = torch.zeros(2, 10, 16, 4, 8, dtype=torch.float16)
    args, names = kv_args_from_caches({"l0": t, "l1": t.clone()}, RankTopology(1, 2, 8))
    assert names == ["l0", "l1"] and args.page_layout == "NHD"
    assert args.kv_data_ptrs[0] == t[0].data_ptr() and args.kv_data_ptrs[2] == t[1].data_ptr()
    assert args.kv_item_lens == [16 * 4 * 8 * 2] * 4
    assert args.layer_buffers == [[0, 2], [1, 3]]
    assert (args.kv_head_num, args.total_kv_head_num, args.engine_rank, args.tp_size) == (4, 8, 1, 2)


def test_hnd_cache_is_recognised_from_its_strides():
    t = torch.zeros(2, 10, 4, 16, 8, dtype=torch.bfloat16).permute(0, 1, 3, 2, 4)
    args, _ = kv_args_from_caches({"l0": t}, RankTopology(0, 1, 4))
    assert args.page_layout == "HND" and args.page_size == 16 and args.head_dim == 8


def test_cpu_backend_cache_is_heads_first_and_told_apart_by_block_size():
    # vLLM's CPU_ATTN: logical (2, num_blocks, heads, block_size, head_dim), unpermuted
    t = torch.zeros(2, 10, 4, 16, 8, dtype=torch.bfloat16)
    args, _ = kv_args_from_caches({"l0": t}, RankTopology(0, 2, 8, block_size=16))
    assert args.page_layout == "HND" and args.page_size == 16 and args.kv_head_num == 4
    assert args.kv_item_lens == [4 * 16 * 8 * 2] * 2 and args.head_dim == 8
    # FlashAttention's (2, blocks, block_size, heads, dim) with the same block size
    t = torch.zeros(2, 10, 16, 4, 8, dtype=torch.bfloat16)
    args, _ = kv_args_from_caches({"l0": t}, RankTopology(0, 2, 8, block_size=16))
    assert args.page_layout == "NHD" and args.kv_head_num == 4
    # 16 local heads and block 16: the shape cannot tell, the platform does
    t = torch.zeros(2, 10, 16, 16, 8, dtype=torch.bfloat16)
    assert kv_args_from_caches({"l0": t}, RankTopology(0, 1, 16, block_size=16))[0] \
        .page_layout == "NHD"
    assert kv_args_from_caches({"l0": t}, RankTopology(0, 1, 16, block_size=16,
                                                       heads_first=True))[0] \
        .page_layout == "HND"
    with pytest.raises(ValueError, match="not block_size 16 and 4 local KV heads"):
        kv_args_from_caches({"l0": torch.zeros(2, 10, 8, 4, 8)},
                            RankTopology(0, 2, 8, block_size=16))


def test_mla_cache_is_one_latent_buffer_per_layer():
    t = torch.zeros(10, 16, 576, dtype=torch.bfloat16)
    args, _ = kv_args_from_caches({"l0": t}, RankTopology(0, 2, 1))
    assert args.is_mla and args.layer_buffers == [[0]] and args.head_dim == 576


def test_flashinfer_cache_is_k_and_v_buffers_with_a_block_stride():
    # (num_blocks, 2, block_size, heads, dim): K and V of a block side by side
    t = torch.zeros(10, 2, 16, 4, 8, dtype=torch.float16)
    args, _ = kv_args_from_caches({"l0": t}, RankTopology(0, 2, 8, block_size=16))
    half = 16 * 4 * 8 * 2
    assert args.page_layout == "NHD" and args.kv_item_lens == [half, half]
    assert args.kv_data_ptrs == [t.data_ptr(), t.data_ptr() + half]
    assert args.kv_page_strides == [2 * half, 2 * half]
    assert args.kv_data_lens == [9 * 2 * half + half] * 2
    # HND: FlashInfer allocates (blocks, 2, heads, tokens, dim) and permutes it
    t = torch.zeros(10, 2, 4, 16, 8, dtype=torch.float16).permute(0, 1, 3, 2, 4)
    args, _ = kv_args_from_caches({"l0": t}, RankTopology(0, 2, 8, block_size=16))
    assert args.page_layout == "HND" and args.kv_page_strides == [2 * half, 2 * half]


def test_layouts_that_cannot_be_sliced_are_refused():
    with pytest.raises(ValueError, match="block layout"):
        kv_args_from_caches({"a": torch.zeros(2, 4, 16, 4, 8),
                             "b": torch.zeros(2, 4, 4, 16, 8).permute(0, 1, 3, 2, 4)},
                            RankTopology(0, 1, 4))
    with pytest.raises(ValueError, match="do not cover"):
        kv_args_from_caches({"l0": torch.zeros(2, 4, 16, 2, 8)}, RankTopology(0, 2, 8))


def test_shared_layer_tensors_register_once():
    t = torch.zeros(2, 4, 16, 4, 8)
    _, names = kv_args_from_caches({"a": t, "b": t}, RankTopology(0, 1, 4))
    assert names == ["a"]


def test_rooms_never_collide_among_live_requests():
    table = RoomTable("inst")
    r1 = table.assign("req-1")
    assert r1 == room_hash("inst", "req-1") and table.assign("req-1") == r1
    # a proxy-given room that a live request holds is refused ...
    with pytest.raises(ValueError, match="in use"):
        table.assign("other", room=r1)
    # ... and a hash landing on a live room moves to a free one
    squatter = RoomTable("inst")
    squatter.assign("squat", room=room_hash("inst", "req-2"))
    assert squatter.assign("req-2") != room_hash("inst", "req-2")
    table.release("req-1")
    assert table.assign("other", room=r1) == r1 and len(table) == 1


def test_sglang_refuses_compressed_mla_pools_where_token_positions_matter():
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.server_args import ServerArgs

    from pdkv.integrations.sglang.kvargs import kv_args_from_sglang
    buf = np.zeros(640, dtype=np.uint8)
    a = KVArgs()
    a.engine_rank, a.page_size = 0, 4
    a.kv_data_ptrs, a.kv_data_lens, a.kv_item_lens = [buf.ctypes.data], [640], [64]
    a.state_data_ptrs = []
    a.mla_compression_ratios = [0, 4, 128]  # DeepSeek-V4
    with pytest.raises(ValueError, match="compressed-MLA"):
        kv_args_from_sglang(a, ServerArgs(), True)
    a.mla_compression_ratios = None
    assert kv_args_from_sglang(a, ServerArgs(), True).is_mla


def test_metrics_port_is_offset_by_rank():
    from pdkv.integrations.settings import rank_metrics_port
    assert [rank_metrics_port(9400, r) for r in range(4)] == [9400, 9401, 9402, 9403]
    assert rank_metrics_port(0, 3) == 0 and rank_metrics_port(-1, 3) == -1
    with pytest.raises(ValueError, match="65535"):
        rank_metrics_port(65535, 1)


def test_settings_are_validated():
    s = TransferSettings.from_mapping({"bootstrap_addr": "h:1", "waiting_timeout_s": 5,
                                       "verify_checksum": True})
    assert dict(s.knobs) == {"PDKV_WAITING_TIMEOUT_S": "5", "PDKV_VERIFY_CHECKSUM": "1"}
    for bad in ({"bootstrap_addr": "nohost"}, {"bootstrap_addr": "h:1", "backend": "rdma"},
                {"bootstrap_addr": "h:1", "colour": 1},
                {"bootstrap_addr": "h:1", "waiting_timeout_s": "soon"}):
        with pytest.raises(ValueError):
            TransferSettings.from_mapping(bad)


def test_bootstrap_addr_is_parsed_as_the_native_side_parses_it():
    # One host:port parser (common/host_port.h): what the C++ client would refuse later
    # is refused here, with its reason.
    assert TransferSettings.from_mapping({"bootstrap_addr": "[::1]:8998"}).bootstrap_addr == \
        "[::1]:8998"
    for bad, why in (("h:abc", "not a decimal number"), ("h:0", "port 0"),
                     ("h:70000", "out of range"), ("::1:80", "brackets"), (":80", "empty")):
        with pytest.raises(ValueError, match=why):
            TransferSettings.from_mapping({"bootstrap_addr": bad})


def test_sglang_kvargs_translation():
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.server_args import ServerArgs

    from pdkv.integrations.sglang.kvargs import kv_args_from_sglang
    bufs = [np.zeros(640, dtype=np.uint8) for _ in range(5)]  # real host memory
    a = KVArgs()
    a.engine_rank, a.page_size, a.kv_head_num, a.total_kv_head_num = 3, 4, 2, 8
    a.kv_data_ptrs = [b.ctypes.data for b in bufs[:4]]
    a.kv_data_lens, a.kv_item_lens = [640] * 4, [64] * 4
    a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens = [bufs[4].ctypes.data], [80], [10]
    a.state_data_ptrs = []
    args = kv_args_from_sglang(a, ServerArgs(tp_size=8, dp_size=2, enable_dp_attention=True),
                               False)
    assert (args.tp_size, args.dp_size, args.engine_rank) == (4, 2, 3)
    assert args.layer_buffers == [[0, 2], [1, 3]] and args.head_dim * args.dtype_bytes == 8
    a.state_data_ptrs = [[]]  # a state type without buffers
    assert kv_args_from_sglang(a, ServerArgs(), False).tp_size == 1
    a.state_data_ptrs = [[5]]
    with pytest.raises(ValueError, match="state"):
        kv_args_from_sglang(a, ServerArgs(), False)


def test_install_routes_the_taken_over_backend_and_only_it():
    from sglang.srt.disaggregation import utils
    # a module that imported the function by name before install()
    early = types.ModuleType("sglang.srt.disaggregation.early_user")
    early.get_kv_class = utils.get_kv_class
    sys.modules[early.__name__] = early
    from pdkv.integrations.sglang import install
    from pdkv.integrations.sglang.conn import PdkvKVManager, PdkvKVReceiver
    install()
    B, T = utils.TransferBackend, utils.KVClassType
    assert utils.get_kv_class(B.NIXL, T.MANAGER) is PdkvKVManager  # the default takeover
    assert early.get_kv_class(B.NIXL, T.RECEIVER) is PdkvKVReceiver
    with pytest.raises(ImportError):  # mooncake is not installed: sglang's own path runs
        utils.get_kv_class(B.MOONCAKE, T.MANAGER)
    with pytest.raises(ValueError, match="multimodal"):  # newer sglang's extra keyword
        utils.get_kv_class(B.NIXL, T.MANAGER, is_multimodal=True)
    install()  # idempotent: does not wrap twice
    assert utils.get_kv_class.__wrapped__.__module__ == utils.__name__


def _scheduler(layerwise=True):
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from pdkv.integrations.vllm import PdkvConnector
    ktc = KVTransferConfig(kv_connector="PdkvConnector", kv_role="kv_producer",
                           kv_connector_extra_config={"bootstrap_addr": "h:1",
                                                      "layerwise": layerwise})
    return PdkvConnector(VllmConfig(ktc, CacheConfig(4), ModelConfig(4)),
                         KVConnectorRole.SCHEDULER, None)


def test_prefill_chunks_follow_computed_full_blocks():
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request
    from vllm_objects import cached_requests, new_request, scheduler_output
    s = _scheduler()
    r = Request("r", list(range(10)), {"do_remote_decode": True})
    s.update_state_after_alloc(r, KVCacheBlocks(([7, 3],)), 0)
    meta = s.build_connector_meta(scheduler_output([new_request("r", ([7, 3],))], None,
                                                   {"r": 6}, preempted=set()))
    opened, chunk = meta.sends
    assert opened.open and opened.num_blocks_total == 3 and chunk.blocks == [7]  # 6 tokens
    r.num_computed_tokens = 6
    meta = s.build_connector_meta(scheduler_output(
        [], cached_requests(["r"], [([9],)], [6]), {"r": 4}, preempted=set()))
    assert [c.blocks for c in meta.sends] == [[3, 9]]  # the last chunk takes the tail page


def _preempted_then_resumed(s, r, preempted_req_ids: bool):
    """vLLM preempts r (its blocks freed), then resumes it with blocks [4, 5, 6]; returns
    the metadata of the preemption's step and of the resume's step."""
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm_objects import cached_requests, scheduler_output
    r.num_computed_tokens = 0
    at_preemption = s.build_connector_meta(scheduler_output(
        preempted={"r"} if preempted_req_ids else None))
    s.update_state_after_alloc(r, KVCacheBlocks(([4, 5, 6],)), 0)
    at_resume = s.build_connector_meta(scheduler_output(
        [], cached_requests(["r"], [([4, 5, 6],)], [0], resumed={"r"}), {"r": 4},
        preempted=set() if preempted_req_ids else None))
    return at_preemption, at_resume


def test_preemption_before_pdkv_holds_a_page_keeps_the_room():
    # Whole-prompt push, or layerwise before the first full page: nothing was read from
    # the freed blocks, so the room lives on and the pages go out from the new blocks.
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request, RequestStatus
    from vllm_objects import scheduler_output
    for layerwise in (False, True):
        s = _scheduler(layerwise=layerwise)
        r = Request("r", list(range(10)), {"do_remote_decode": True, "pdkv_room": 41})
        s.update_state_after_alloc(r, KVCacheBlocks(([7, 3],)), 0)
        s.build_connector_meta(scheduler_output())  # the room opens
        at_preemption, at_resume = _preempted_then_resumed(s, r, preempted_req_ids=True)
        assert at_preemption.sends == []
        assert [c.blocks for c in at_resume.sends] == ([[4]] if layerwise else [])
        r.num_computed_tokens, r.status = 10, RequestStatus.FINISHED_LENGTH_CAPPED
        delay, params = s.request_finished(r, ([4, 5, 6],))
        assert delay and params["pdkv_room"] == 41
        rest = s.build_connector_meta(scheduler_output()).sends
        assert [(c.room, c.blocks) for c in rest] == [(41, [5, 6] if layerwise else [4, 5, 6])]


def test_preemption_after_pages_went_to_pdkv_fails_the_room_and_resumes_in_a_fresh_one():
    # Layerwise pages handed to pdkv were read from blocks the preemption freed: that
    # room fails (none of its writes lands), the resumed request opens another one and
    # the decode is told that one.
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request, RequestStatus
    from vllm_objects import new_request, scheduler_output
    for preempted_req_ids in (True, False):  # older vLLM leaves preempted_req_ids unset
        s = _scheduler(layerwise=True)
        r = Request("r", list(range(10)), {"do_remote_decode": True, "pdkv_room": 41})
        s.update_state_after_alloc(r, KVCacheBlocks(([7, 3],)), 0)
        s.build_connector_meta(scheduler_output([new_request("r", ([7, 3],))], None,
                                                {"r": 6}))  # page 7 goes to pdkv
        at_preemption, at_resume = _preempted_then_resumed(s, r, preempted_req_ids)
        sends = at_preemption.sends + at_resume.sends
        aborted, opened, chunk = sends
        assert (aborted.room, aborted.abort) == (41, True)
        assert opened.open and opened.room != 41 and chunk.room == opened.room
        assert chunk.blocks == [4]
        r.num_computed_tokens, r.status = 10, RequestStatus.FINISHED_LENGTH_CAPPED
        assert s.request_finished(r, ([4, 5, 6],))[1]["pdkv_room"] == opened.room


def test_request_that_finishes_while_preempted_hands_nothing_off():
    # A vLLM without requires_kv_delivery can finish a request whose last step was in
    # flight at its preemption: its blocks are gone, so no parameters (the decode then
    # computes the prompt) and its room fails.
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request, RequestStatus
    from vllm_objects import scheduler_output
    s = _scheduler(layerwise=False)
    r = Request("r", list(range(10)), {"do_remote_decode": True, "pdkv_room": 41})
    s.update_state_after_alloc(r, KVCacheBlocks(([7, 3, 9],)), 0)
    s.build_connector_meta(scheduler_output(preempted={"r"}))
    r.status = RequestStatus.FINISHED_LENGTH_CAPPED
    assert s.request_finished(r, ([7, 3, 9],)) == (False, None)
    assert [(c.room, c.abort) for c in s.build_connector_meta(scheduler_output()).sends] \
        == [(41, True)]
    assert s.has_pending_push_work() is False


def test_prefill_worker_drops_an_aborted_room_without_reporting_it(monkeypatch):
    # vLLM freed the blocks of a request that ended without a hand-off; reporting it as
    # finished sending would make vLLM free them twice. Also: metrics_port from
    # kv_connector_extra_config serves the rank's Prometheus figures.
    import urllib.request

    import pdkv
    monkeypatch.setenv("PDKV_METRICS_PORT", "-1")  # restored after the test
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from pdkv.integrations.vllm import PdkvConnector
    from pdkv.integrations.vllm.metadata import PdkvConnectorMetadata, SendChunk
    with pdkv.BootstrapServer("127.0.0.1", 0) as server:
        ktc = KVTransferConfig(kv_connector="PdkvConnector", kv_role="kv_producer",
                               kv_connector_extra_config={
                                   "bootstrap_addr": f"127.0.0.1:{server.port}",
                                   "metrics_port": 0})
        worker = PdkvConnector(VllmConfig(ktc, CacheConfig(4), ModelConfig(2)),
                               KVConnectorRole.WORKER, None)
        worker.register_kv_caches({"l0": torch.zeros(2, 8, 4, 2, 8, dtype=torch.float16)})
        try:
            worker.bind_connector_metadata(PdkvConnectorMetadata(
                sends=[SendChunk("r", 77, [], 2, open=True)]))
            worker.start_load_kv(None)
            assert worker.get_finished({"r"}) == (None, None)  # in flight: still held
            worker.bind_connector_metadata(PdkvConnectorMetadata(
                sends=[SendChunk("r", 77, [], 2, abort=True)]))
            worker.start_load_kv(None)
            assert worker.get_finished({"r"}) == (None, None)
            assert worker._worker._senders == {}
            port = worker._worker.mgr.metrics_port
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            assert 'role="prefill"' in text and "aborted_locally" in text, text[:500]
        finally:
            worker.shutdown()


def _run_python(args, env_extra=None):
    import os
    import subprocess
    from engine_replay import STANDINS
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([STANDINS, os.environ["PYTHONPATH"]]))
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_launch_server_wrapper_installs_in_sglang_and_its_spawned_schedulers():
    # The default takeover name, nixl: the scheduler's ModelRunner starts (no other
    # backend's setup runs) and sglang's selection returns pdkv's classes.
    out = _run_python(["-m", "pdkv.integrations.sglang.launch_server",
                       "--disaggregation-transfer-backend", "nixl"])
    assert out.strip() == "main=PdkvKVManager scheduler=PdkvKVManager"
    # without the wrapper, sglang's own selection runs (and fails: nixl is absent)
    out = _run_python(["-m", "sglang.launch_server", "--disaggregation-transfer-backend",
                       "nixl"])
    assert out.startswith("main=ImportError")
    # PDKV_SGLANG_TAKEOVER picks another name. mooncake shows why it is not the default:
    # get_kv_class is pdkv's, but ModelRunner still builds Mooncake's transfer engine.
    out = _run_python(["-m", "pdkv.integrations.sglang.launch_server",
                       "--disaggregation-transfer-backend", "mooncake"],
                      {"PDKV_SGLANG_TAKEOVER": "mooncake"})
    assert out.startswith("main=PdkvKVManager scheduler=ModelRunner ImportError"), out


def test_pth_hook_patches_sglang_when_it_is_imported_later():
    # What the documented .pth line runs at interpreter start, before sglang is imported.
    out = _run_python(["-c", "import pdkv.integrations.sglang as p; p.install_on_import(); "
                             "from sglang.srt.disaggregation.utils import get_kv_class, "
                             "TransferBackend as B, KVClassType as T; "
                             "print(get_kv_class(B.NIXL, T.SENDER).__name__)"])
    assert out.strip() == "PdkvKVSender"
