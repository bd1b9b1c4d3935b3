"""The engine adapters and the engine stand-ins against the checked-in snapshot of the
upstream signatures (standins/upstream_signatures.json). An adapter method must take the
upstream parameters in the upstream order with the upstream defaults (it may add
optional ones after them); a stand-in must match exactly. The attributes the adapters
read from upstream objects (Request, SchedulerOutput, KVCacheBlocks, KVArgs, ...) are
listed too: the stand-ins must have them, and the adapters, run over recording
stand-ins, must read nothing else. Every file read has its commit. Refreshing the
snapshot from a newer upstream commit makes any drift fail here."""
import importlib
import inspect
import json
import os

import pytest

from engine_replay import STANDINS, use_standins

use_standins()
SNAPSHOT = json.load(open(os.path.join(STANDINS, "upstream_signatures.json")))


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _params(fn) -> list[str]:
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            out.append("*" + p.name)
        elif p.kind == p.VAR_KEYWORD:
            out.append("**" + p.name)
        elif p.default is not p.empty:
            out.append(f"{p.name}={p.default!r}")
        else:
            out.append(p.name)
    return out


def _cases(kind: str):
    for engine in ("vllm", "sglang"):
        for cls_name, spec in SNAPSHOT[engine]["classes"].items():
            if kind not in spec:
                continue  # an upstream class the adapters call but do not implement
            methods = dict(spec["methods"])
            if kind == "standin":
                methods.update(spec.get("base_only", {}))
            for method, params in methods.items():
                yield pytest.param(spec[kind], method, params, id=f"{engine}-{cls_name}.{method}")


@pytest.mark.parametrize("dotted,method,upstream", list(_cases("standin")))
def test_standin_matches_upstream(dotted, method, upstream):
    assert _params(getattr(_resolve(dotted), method)) == upstream


@pytest.mark.parametrize("dotted,method,upstream", list(_cases("adapter")))
def test_adapter_accepts_the_upstream_call(dotted, method, upstream):
    cls = _resolve(dotted)
    assert method in vars(cls) or method in ("__init__",), f"{dotted} does not define {method}"
    ours = _params(getattr(cls, method))
    named = [p for p in upstream if not p.startswith("*")]
    # Same names in the same order; an upstream default must be kept, and a default the
    # adapter adds only makes it accept more calls.
    mine = [p if "=" in u else p.split("=")[0] for p, u in zip(ours, named)]
    assert mine == named, f"{method}: upstream {upstream}, adapter {ours}"
    for extra in ours[len(named):]:
        assert "=" in extra or extra.startswith("*"), f"{method}: extra required {extra}"
    if "**kwargs" in upstream:
        assert any(p.startswith("**") for p in ours), f"{method} must accept **kwargs"


def test_adapters_subclass_the_engine_bases():
    for engine in ("vllm", "sglang"):
        for spec in SNAPSHOT[engine]["classes"].values():
            if "adapter" in spec:
                assert issubclass(_resolve(spec["adapter"]), _resolve(spec["standin"]))


def test_enums_functions_and_dataclasses_match():
    for engine in ("vllm", "sglang"):
        for dotted, members in SNAPSHOT[engine].get("enums", {}).items():
            enum = _resolve(dotted)
            got = {name: getattr(enum, name) for name in members}
            got = {k: getattr(v, "value", v) for k, v in got.items()}
            assert got == members, dotted
    for dotted, params in SNAPSHOT["sglang"]["functions"].items():
        assert _params(_resolve(dotted)) == params
    import dataclasses
    for dotted, fields in SNAPSHOT["sglang"]["dataclasses"].items():
        assert [f.name for f in dataclasses.fields(_resolve(dotted))] == fields


def test_every_file_read_has_its_commit():
    for engine in ("vllm", "sglang"):
        for path, commit in SNAPSHOT[engine]["commits"].items():
            assert len(commit) == 40 and int(commit, 16) >= 0, f"{engine} {path}: {commit!r}"


def test_enum_members_exist():
    for dotted, names in SNAPSHOT["vllm"].get("enum_members", {}).items():
        enum = _resolve(dotted)
        assert [n for n in names if not hasattr(enum, n)] == [], dotted


# --- attributes the adapters read ------------------------------------------------------

def _standin_instances():
    """One instance of every stand-in class listed under "attributes"."""
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.server_args import ServerArgs
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.platforms import current_platform
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request
    from vllm_objects import cached_requests, new_request, scheduler_output
    cached = cached_requests()
    return [Request("r", [1], {}), scheduler_output(cached=cached),
            new_request("r", ([1],)), cached, KVCacheBlocks(([1],)),
            KVConnectorOutput(), KVTransferConfig(), VllmConfig(KVTransferConfig()),
            CacheConfig(), ModelConfig(), current_platform, KVArgs(), ServerArgs()]


def _key(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _attributes() -> dict:
    return {**SNAPSHOT["vllm"]["attributes"], **SNAPSHOT["sglang"]["attributes"]}


def _declared(obj, name: str) -> bool:
    if hasattr(obj, name):
        return True
    return any(name in getattr(c, "__annotations__", {}) for c in type(obj).__mro__)


def test_standins_have_every_attribute_the_adapters_read():
    instances = {_key(o): o for o in _standin_instances()}
    assert sorted(instances) == sorted(_attributes())
    for key, spec in _attributes().items():
        missing = [n for n in spec["read"] if not _declared(instances[key], n)]
        assert missing == [], f"stand-in {key} lacks {missing}"


class _Recorder:
    """Forwards attribute reads to a stand-in object and logs each name read (found or
    not: a getattr with a default is a read too); values of listed types are wrapped."""

    def __init__(self, obj, log):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name):
        self._log.setdefault(_key(self._obj), set()).add(name)
        return _wrap(getattr(self._obj, name), self._log)

    def __setattr__(self, name, value):
        setattr(self._obj, name, value)


def _wrap(value, log):
    if _key(value) in _attributes():
        return _Recorder(value, log)
    if isinstance(value, list) and any(_key(v) in _attributes() for v in value):
        return [_wrap(v, log) for v in value]
    return value


def _run_vllm_adapter(log, monkeypatch):
    import torch

    import pdkv
    import vllm.platforms
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request, RequestStatus
    from vllm_objects import cached_requests, new_request, scheduler_output

    from pdkv.integrations.vllm import PdkvConnector
    W = lambda o: _wrap(o, log)  # noqa: E731
    monkeypatch.setattr(vllm.platforms, "current_platform", W(vllm.platforms.current_platform))

    def connector(role, kv_role, addr="127.0.0.1:1", layerwise=True):
        ktc = KVTransferConfig(kv_connector="PdkvConnector", kv_role=kv_role,
                               kv_connector_extra_config={"bootstrap_addr": addr,
                                                          "layerwise": layerwise})
        return PdkvConnector(W(VllmConfig(ktc, CacheConfig(4), ModelConfig(4))), role, None)

    # prefill scheduler: layerwise chunks, preemption, hand-off, finished sending
    s = connector(KVConnectorRole.SCHEDULER, "kv_producer")
    r = Request("r", list(range(10)), {"do_remote_decode": True})
    s.update_state_after_alloc(W(r), W(KVCacheBlocks(([7, 3],))), 0)
    s.build_connector_meta(W(scheduler_output([new_request("r", ([7, 3],))], None,
                                              {"r": 6})))
    r.num_computed_tokens = 6
    s.build_connector_meta(W(scheduler_output([], cached_requests(["r"], [([9],)], [6]),
                                              {"r": 4}, preempted=set())))
    r.num_computed_tokens, r.status = 10, RequestStatus.FINISHED_LENGTH_CAPPED
    s.request_finished(W(r), ([7, 3, 9],))
    s.has_pending_push_work()
    s.update_connector_output(W(KVConnectorOutput(finished_sending={"r"})))
    # decode scheduler: a load, then its abort mid-flight
    d = connector(KVConnectorRole.SCHEDULER, "kv_consumer")
    q = Request("q", list(range(8)), {"do_remote_prefill": True, "pdkv_room": 5,
                                      "pdkv_bootstrap_addr": "p:1"})
    d.get_num_new_matched_tokens(W(q), 0)
    d.update_state_after_alloc(W(q), W(KVCacheBlocks(([1, 2],))), 8)
    q.status = RequestStatus.FINISHED_ABORTED
    d.request_finished(W(q), ([1, 2],))
    d.update_connector_output(W(KVConnectorOutput(finished_recving=set())))
    # worker: registering caches reads the topology (config, platform)
    with pdkv.BootstrapServer("127.0.0.1", 0) as server:
        w = connector(KVConnectorRole.WORKER, "kv_producer", f"127.0.0.1:{server.port}")
        w.register_kv_caches({"l0": torch.zeros(2, 8, 4, 4, 8, dtype=torch.float16)})
        w.shutdown()


def _run_sglang_adapter(log):
    import numpy as np

    import pdkv
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.server_args import ServerArgs

    from pdkv.integrations.sglang.conn import PdkvKVManager, own_bootstrap_addr
    bufs = [np.zeros(640, dtype=np.uint8) for _ in range(3)]
    a = KVArgs()
    a.engine_rank, a.page_size, a.kv_head_num, a.total_kv_head_num = 0, 4, 2, 2
    a.kv_data_ptrs = [b.ctypes.data for b in bufs[:2]]
    a.kv_data_lens, a.kv_item_lens = [640, 640], [64, 64]
    a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens = [bufs[2].ctypes.data], [64], [8]
    a.state_data_ptrs, a.system_dp_rank, a.pp_rank = [], 0, 0
    with pdkv.BootstrapServer("127.0.0.1", 0) as server:
        server_args = ServerArgs(disaggregation_bootstrap_port=server.port)
        own_bootstrap_addr(_wrap(server_args, log))
        mgr = PdkvKVManager(_wrap(a, log), DisaggregationMode.DECODE, _wrap(server_args, log),
                            False)
        mgr.shutdown()
    # A hybrid rank's state components (Mamba slots, SWA pages), mapped without a manager:
    # what the adapter reads of them.
    from sglang.srt.disaggregation.base.conn import StateType

    from pdkv.integrations.sglang.state_layout import state_layout
    h = KVArgs()
    h.state_types = [StateType.MAMBA, StateType.SWA]
    h.state_data_ptrs, h.state_data_lens = [[1, 2], [3, 4]], [[96, 192], [640, 640]]
    h.state_item_lens, h.state_conv_shard_groups = [[24, 48], [64, 64]], [[[8, 16]], []]
    state_layout(_wrap(h, log), False, 4, 64)


def test_adapters_read_only_the_listed_attributes(monkeypatch):
    pytest.importorskip("torch")
    log: dict = {}
    _run_vllm_adapter(log, monkeypatch)
    _run_sglang_adapter(log)
    for key, names in sorted(log.items()):
        spec = _attributes()[key]
        unlisted = sorted(names - set(spec["read"]) - set(spec.get("optional", ())))
        assert unlisted == [], f"the adapters read {unlisted} of {key}: add them to the snapshot"
    # and the snapshot lists nothing the adapters no longer read
    for key, spec in _attributes().items():
        stale = sorted(set(spec["read"]) - log.get(key, set()))
        assert stale == [], f"{key}: {stale} listed but not read by the adapters"


def test_kvargs_stand_in_has_upstreams_fields_in_order():
    # sglang's KVArgs is an attribute bag declared by annotations; the replays fill it as
    # prefill.py and decode.py do, so every upstream field must be declared, in order.
    for dotted, fields in SNAPSHOT["sglang"].get("kvargs_fields", {}).items():
        assert list(_resolve(dotted).__annotations__) == fields
