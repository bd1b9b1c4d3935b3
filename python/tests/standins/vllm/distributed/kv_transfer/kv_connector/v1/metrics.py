"""Stand-in for vllm/distributed/kv_transfer/kv_connector/v1/metrics.py: KVConnectorStats
and KVConnectorPromMetrics (signatures and behaviour of the base classes only)."""
from dataclasses import dataclass, field
from typing import Any, TypeVar

try:  # upstream imports it unconditionally (vLLM depends on prometheus_client)
    from prometheus_client import Counter, Gauge, Histogram
except ImportError:  # stand-in only: the stats tests run without it
    Counter = Gauge = Histogram = None

PromMetric = Any
PromMetricT = TypeVar("PromMetricT")


@dataclass
class KVConnectorStats:
    data: dict[str, Any] = field(default_factory=dict)

    def reset(self):
        raise NotImplementedError

    def aggregate(self, other: "KVConnectorStats") -> "KVConnectorStats":
        raise NotImplementedError

    def reduce(self) -> dict:
        raise NotImplementedError

    def is_empty(self) -> bool:
        raise NotImplementedError


class KVConnectorPromMetrics:
    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._gauge_cls = metric_types[Gauge]
        self._counter_cls = metric_types[Counter]
        self._histogram_cls = metric_types[Histogram]
        self._labelnames = labelnames
        self.per_engine_labelvalues = per_engine_labelvalues

    def make_per_engine(self, metric) -> dict:
        return {idx: metric.labels(*labelvalues)
                for idx, labelvalues in self.per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0):
        raise NotImplementedError
