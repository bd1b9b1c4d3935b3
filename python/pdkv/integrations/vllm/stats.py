"""PdkvConnectorStats: pdkv's per-rank transfer counters in vLLM's KVConnectorStats shape.

Workers report what changed since their last report (``data`` holds counter deltas);
vLLM aggregates the ranks' objects and logs ``reduce()``. The same counters are served in
the Prometheus text format by each rank when ``metrics_port`` is set."""
from __future__ import annotations

import dataclasses

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

COUNTERS = ("rooms_succeeded", "rooms_failed", "bytes_written", "blocks_written",
            "latency_count", "latency_sum_ms")


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
        return out

    def is_empty(self) -> bool:
        return not any(self.data.get(k, 0) for k in COUNTERS)


def flatten(metrics: dict) -> dict:
    """COUNTERS from KVManager.metrics(): the latency pair is its end-to-end stage
    (rooms timed, seconds in all)."""
    out = {k: metrics.get(k, 0) for k in COUNTERS}
    count, seconds = metrics.get("stages", {}).get("end_to_end", (0, 0.0))
    out["latency_count"] = count
    out["latency_sum_ms"] = seconds * 1000.0
    return out


class CounterDelta:
    """What a cumulative counter dict gained since the previous call."""

    def __init__(self):
        self._last: dict = {}

    def take(self, metrics: dict) -> dict:
        now = flatten(metrics)
        delta = {k: now[k] - self._last.get(k, 0) for k in COUNTERS}
        self._last = now
        return delta
