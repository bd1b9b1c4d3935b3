"""PdkvConnectorStats: pdkv's per-rank transfer figures in vLLM's KVConnectorStats shape.

Workers report what changed since their last report (``data`` holds deltas, all
additive, so vLLM's aggregation over ranks and over a logging interval is a sum):

- ``COUNTERS``: rooms succeeded / failed, bytes and blocks written, end-to-end latency
  (count, total ms): what ``reduce()`` summarises for vLLM's log line;
- ``failures/<cause>``: rooms failed, by pdkv's cause label (docs/CONFIG.md, "Metrics");
- ``hist/<name>/<i>``, ``hist/<name>/sum``, ``hist/<name>/count``: pdkv's histograms
  (``stage:<stage>`` seconds, ``room_bytes``, ``room_blocks``) as per-bucket counts, ``i``
  indexing ``HISTOGRAM_BOUNDS[name]`` then +Inf.

vLLM turns the aggregated ``data`` into Prometheus samples on its own /metrics through
``PdkvConnector.build_prom_metrics`` (``pdkv.integrations.vllm.prom``)."""
from __future__ import annotations

import dataclasses

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

COUNTERS = ("rooms_succeeded", "rooms_failed", "bytes_written", "blocks_written",
            "latency_count", "latency_sum_ms")

# pdkv's bucket bounds (kv/metrics/transfer_metrics.cc), in seconds, bytes and blocks;
# test_vllm_prometheus.py checks them against what the native metrics report.
_KIB, _MIB, _GIB = 1024, 1024 ** 2, 1024 ** 3
SECONDS_BOUNDS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                  1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BYTES_BOUNDS = tuple(float(b) for b in (4 * _KIB, 16 * _KIB, 64 * _KIB, 256 * _KIB, _MIB,
                                        4 * _MIB, 16 * _MIB, 64 * _MIB, 256 * _MIB, _GIB,
                                        4 * _GIB, 16 * _GIB))
BLOCKS_BOUNDS = tuple(float(4 ** i) for i in range(11))  # 1 .. 1048576
STAGES = ("queue_wait", "planning", "wire", "status_delivery", "end_to_end")
HISTOGRAM_BOUNDS = {**{f"stage:{s}": SECONDS_BOUNDS for s in STAGES},
                    "room_bytes": BYTES_BOUNDS, "room_blocks": BLOCKS_BOUNDS}


@dataclasses.dataclass
class PdkvConnectorStats(KVConnectorStats):
    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: "KVConnectorStats") -> "PdkvConnectorStats":
        for key, value in (other.data or {}).items():
            self.data[key] = self.data.get(key, 0) + value
        return self

    def reduce(self) -> dict:
        out = {k: self.data.get(k, 0) for k in COUNTERS}
        count = out["latency_count"]
        out["avg_transfer_ms"] = out["latency_sum_ms"] / count if count else 0.0
        for key, value in sorted(self.data.items()):
            if key.startswith("failures/") and value:
                out["failed_" + key.split("/", 1)[1]] = value
        return out

    def is_empty(self) -> bool:
        return not any(self.data.values())


def flatten(metrics: dict) -> dict:
    """Every additive figure of KVManager.metrics(), keyed as in ``data``: the latency
    pair is its end-to-end stage (rooms timed, seconds in all)."""
    out = {k: metrics.get(k, 0) for k in COUNTERS}
    count, seconds = metrics.get("stages", {}).get("end_to_end", (0, 0.0))
    out["latency_count"] = count
    out["latency_sum_ms"] = seconds * 1000.0
    for cause, n in (metrics.get("failures_by_cause") or {}).items():
        out[f"failures/{cause}"] = n
    for name, h in (metrics.get("histograms") or {}).items():
        for i, n in enumerate(h["counts"]):
            out[f"hist/{name}/{i}"] = n
        out[f"hist/{name}/sum"] = h["sum"]
        out[f"hist/{name}/count"] = h["count"]
    return out


class CounterDelta:
    """What a manager's cumulative figures gained since the previous call (keys that did
    not change are left out)."""

    def __init__(self):
        self._last: dict = {}

    def take(self, metrics: dict) -> dict:
        now = flatten(metrics)
        delta = {k: v - self._last.get(k, 0) for k, v in now.items()}
        self._last = now
        return {k: v for k, v in delta.items() if v or k in COUNTERS}
