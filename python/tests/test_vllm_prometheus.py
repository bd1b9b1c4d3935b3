"""pdkv's figures on vLLM's own /metrics (PdkvConnector.build_prom_metrics) with a real
prometheus_client registry (Debian python3-prometheus-client), fed the way vLLM feeds it:
each worker's get_kv_connector_stats() data, summed over the instance's ranks by the
stats' aggregate(), then observe(data, engine_idx). And a fixed metrics_port with TP 2
on one host: each rank process serves its own endpoint on port + rank."""
import functools
import socket
import urllib.request

import pytest

from engine_replay import Ranks, use_standins, wait_stop

use_standins()
torch = pytest.importorskip("torch")
prometheus_client = pytest.importorskip("prometheus_client")

import pdkv  # noqa: E402
from vllm_cluster import assert_delivered, run_prefill_then_decode  # noqa: E402

LABELS = {"model_name": "m", "engine": "0"}


def _prom(role: str):
    """A PdkvConnector's KVConnectorPromMetrics on a fresh registry, as vLLM builds it."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
    from vllm.config import KVTransferConfig, VllmConfig

    from pdkv.integrations.vllm import PdkvConnector
    registry = CollectorRegistry()
    types = {cls: functools.partial(cls, registry=registry) for cls in (Gauge, Counter, Histogram)}
    ktc = KVTransferConfig(kv_connector="PdkvConnector", kv_role=role,
                           kv_connector_module_path="pdkv.integrations.vllm",
                           kv_connector_extra_config={"bootstrap_addr": "h:1"})
    prom = PdkvConnector.build_prom_metrics(VllmConfig(ktc), types, list(LABELS),
                                            {0: list(LABELS.values())})
    return registry, prom


def _aggregate(reports):
    """What vLLM's scheduler hands observe(): the ranks' stats summed (aggregate)."""
    from pdkv.integrations.vllm import PdkvConnector
    total = PdkvConnector.build_kv_connector_stats({})
    for report in reports:
        total.aggregate(PdkvConnector.build_kv_connector_stats(report["stats_data"]))
    return total.data


def test_bucket_values_land_in_their_buckets_and_keep_the_sum():
    from pdkv.integrations.vllm.prom import bucket_values
    bounds = (0.001, 0.01, 0.1)
    counts = [2, 0, 3, 1]  # the last one past 0.1 (+Inf)
    total = 2 * 0.0005 + 3 * 0.05 + 0.7
    values = bucket_values(bounds, counts, total)
    assert [n for _, n in values] == [2, 3, 1]
    (v0, _), (v2, _), (vinf, _) = values
    assert 0 <= v0 <= 0.001 and 0.01 < v2 <= 0.1 and vinf > 0.1
    assert sum(v * n for v, n in values) == pytest.approx(total)
    # an impossible sum (a wrong report) still keeps every value in its bucket
    for value, n in bucket_values(bounds, [0, 4, 0, 0], 100.0):
        assert 0.001 < value <= 0.01 and n == 4


def test_python_bucket_bounds_are_the_native_ones():
    from pdkv.integrations.vllm.stats import HISTOGRAM_BOUNDS
    from kv_harness import RankMemory, Shape
    mem = RankMemory(Shape(), 1, 0)
    with pdkv.BootstrapServer("127.0.0.1", 0) as server:
        mgr = pdkv.KVManager(mem.kv_args(pdkv, 0, 1, 1), "prefill", f"127.0.0.1:{server.port}")
        native = mgr.metrics()["histograms"]
        mgr.shutdown()
    assert sorted(native) == sorted(HISTOGRAM_BOUNDS)
    for name, bounds in HISTOGRAM_BOUNDS.items():
        assert native[name]["bounds"] == pytest.approx(list(bounds)), name
        assert len(native[name]["counts"]) == len(bounds) + 1


def test_transfers_show_on_vllms_registry():
    requests = [("prom-a", 22, 1, None), ("prom-b", 9, 2, None)]
    done, _ = run_prefill_then_decode(1, 2, "NHD", 4, requests, chunk=8,
                                      extra_p={"layerwise": True})
    assert_delivered(done, requests, 1, 2)
    for role, reports, rooms in (("kv_producer", [done["p0"]], 2),
                                 ("kv_consumer", [done["d0"], done["d1"]], 4)):
        registry, prom = _prom(role)
        get = registry.get_sample_value
        # before any report: the families are there at 0
        assert get("vllm:pdkv_rooms_total", {**LABELS, "outcome": "success"}) == 0
        data = _aggregate(reports)
        prom.observe(data, 0)
        assert get("vllm:pdkv_rooms_total", {**LABELS, "outcome": "success"}) == rooms
        assert get("vllm:pdkv_rooms_total", {**LABELS, "outcome": "failed"}) == 0
        e2e = {**LABELS, "stage": "end_to_end"}
        assert get("vllm:pdkv_room_stage_seconds_count", e2e) == rooms
        assert get("vllm:pdkv_room_stage_seconds_sum", e2e) == pytest.approx(
            data["hist/stage:end_to_end/sum"])
        assert get("vllm:pdkv_room_stage_seconds_bucket", {**e2e, "le": "+Inf"}) == rooms
        # every bucket holds exactly what pdkv counted
        from pdkv.integrations.vllm.stats import SECONDS_BOUNDS
        cumulative = 0
        for i, bound in enumerate(SECONDS_BOUNDS):
            cumulative += data.get(f"hist/stage:end_to_end/{i}", 0)
            assert get("vllm:pdkv_room_stage_seconds_bucket",
                       {**e2e, "le": repr(float(bound))}) == cumulative, bound
        written = get("vllm:pdkv_written_bytes_total", LABELS)
        if role == "kv_producer":
            assert written == data["bytes_written"] > 0
            assert get("vllm:pdkv_room_bytes_count", LABELS) == rooms
            assert get("vllm:pdkv_room_stage_seconds_count", {**LABELS, "stage": "wire"}) == rooms
        else:
            assert written == 0
        # a later interval adds to the same series
        prom.observe({"rooms_failed": 1, "failures/peer_dead": 1}, 0)
        assert get("vllm:pdkv_rooms_total", {**LABELS, "outcome": "failed"}) == 1
        assert get("vllm:pdkv_room_failures_total", {**LABELS, "cause": "peer_dead"}) == 1
        text = prometheus_client.generate_latest(registry).decode()
        assert 'vllm:pdkv_room_stage_seconds_bucket{engine="0",le="0.0001",model_name="m"' \
               ',stage="queue_wait"}' in text


def _free_port_pair() -> int:
    """A port P with P and P + 1 free right now."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two consecutive free ports")


def _metrics_rank_main(cfg, out_q, in_q):
    """One TP rank's worker connector with the instance's fixed metrics_port."""
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.parallel_state import set_tensor_model_parallel

    from pdkv.integrations.vllm import PdkvConnector
    set_tensor_model_parallel(cfg["rank"], 2)
    ktc = KVTransferConfig(kv_connector="PdkvConnector", kv_role="kv_producer",
                           kv_connector_extra_config={"bootstrap_addr": cfg["addr"],
                                                      "metrics_port": cfg["port"]})
    worker = PdkvConnector(VllmConfig(ktc, CacheConfig(4), ModelConfig(4)),
                           KVConnectorRole.WORKER, None)
    worker.register_kv_caches({"l0": torch.zeros(2, 8, 4, 2, 8, dtype=torch.float16)})
    port = worker._worker.mgr.metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out_q.put(("port", cfg["name"], port, f'rank="{cfg["rank"]}"' in text))
    wait_stop(in_q)
    worker.shutdown()


def test_fixed_metrics_port_with_tp2_on_one_host_gives_each_rank_its_own():
    base = _free_port_pair()
    with Ranks() as ranks:
        for r in range(2):
            ranks.start(f"w{r}", _metrics_rank_main, dict(rank=r, port=base))
        ranks.serve_bootstrap()
        got = {m[1]: (m[2], m[3]) for m in ranks.expect("port", 2, timeout=60)}
    assert got == {"w0": (base, True), "w1": (base + 1, True)}, got
