"""pdkv's figures on vLLM's own /metrics: the KVConnectorPromMetrics that
``PdkvConnector.build_prom_metrics`` returns.

vLLM builds it in the process that serves /metrics (the API server), from the metric
classes it passes in ``metric_types`` (prometheus_client's, or Ray's wrappers), and calls
``observe(data, engine_idx)`` with the stats data its workers reported, summed over the
TP ranks of the engine (PdkvConnectorStats). The families mirror pdkv's own endpoint
(pdkv.metrics), prefixed ``vllm:`` and labelled with vLLM's labels (model, engine):

- ``vllm:pdkv_rooms_total{outcome="success"|"failed"}``
- ``vllm:pdkv_room_failures_total{cause}``  (pdkv's cause labels)
- ``vllm:pdkv_written_bytes_total``, ``vllm:pdkv_written_blocks_total``
- ``vllm:pdkv_room_stage_seconds{stage}`` (histogram: queue_wait, planning, wire,
  status_delivery, end_to_end), ``vllm:pdkv_room_bytes``, ``vllm:pdkv_room_blocks``
  (histograms), with pdkv's buckets.

Histograms reach this process as per-bucket counts and a sum. They are replayed through
the public ``observe()`` only (so Ray's wrappers work too): each bucket's count of values
placed inside the bucket, spread so that their sum is the reported sum. Bucket counts
and counts are exact; the sum is exact up to float rounding.
"""
from __future__ import annotations

import math
from typing import Any

from prometheus_client import Counter, Histogram
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics

from pdkv.integrations.vllm.stats import HISTOGRAM_BOUNDS, STAGES

_PREFIX = "vllm:pdkv_"


def bucket_values(bounds, counts, total: float) -> list[tuple[float, int]]:
    """(value, how many) per non-empty bucket: every value inside its bucket
    (``bounds[i-1] < v <= bounds[i]``; the last bucket is +Inf), the values summing to
    ``total`` when the data allow it (they do for real observations)."""
    n_inf = int(counts[len(bounds)]) if len(counts) > len(bounds) else 0
    finite = [(bounds[i - 1] if i else 0.0, bounds[i], int(c))
              for i, c in enumerate(counts[:len(bounds)]) if c]
    low = sum(lo * n for lo, _, n in finite)
    high = sum(hi * n for _, hi, n in finite)
    inf_low = bounds[-1] if bounds else 0.0
    inf_value = None
    rest = total
    if n_inf:
        # +Inf values take what the finite buckets cannot hold, and at least just above
        # the last bound.
        rest = total - n_inf * inf_low
        share = max(rest - high, 0.0) / n_inf
        inf_value = math.nextafter(inf_low + share, math.inf) if share == 0 else inf_low + share
        rest = min(rest, high)
    t = (rest - low) / (high - low) if high > low else 1.0
    t = min(max(t, 0.0), 1.0)
    out = []
    for lo, hi, n in finite:
        v = lo + t * (hi - lo)
        if lo and v <= lo:  # a bucket is (lo, hi]
            v = math.nextafter(lo, math.inf)
        out.append((min(v, hi), n))
    if n_inf:
        out.append((inf_value, n_inf))
    return out


class PdkvPromMetrics(KVConnectorPromMetrics):
    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        counter, histogram = metric_types[Counter], metric_types[Histogram]
        names = list(labelnames)
        self._rooms = counter(name=_PREFIX + "rooms", labelnames=names + ["outcome"],
                              documentation="pdkv rooms (one per request and rank) ended, "
                                            "by outcome.")
        self._failures = counter(name=_PREFIX + "room_failures",
                                 labelnames=names + ["cause"],
                                 documentation="pdkv rooms failed, by cause.")
        self._bytes = counter(name=_PREFIX + "written_bytes", labelnames=names,
                              documentation="KV bytes pdkv wrote to decode ranks and they "
                                            "acknowledged.")
        self._blocks = counter(name=_PREFIX + "written_blocks", labelnames=names,
                               documentation="Contiguous blocks pdkv wrote to decode ranks "
                                             "and they acknowledged.")
        self._stage = histogram(name=_PREFIX + "room_stage_seconds",
                                labelnames=names + ["stage"],
                                buckets=list(HISTOGRAM_BOUNDS["stage:wire"]),
                                documentation="Time a pdkv room spent in each stage.")
        self._room_bytes = histogram(name=_PREFIX + "room_bytes", labelnames=names,
                                     buckets=list(HISTOGRAM_BOUNDS["room_bytes"]),
                                     documentation="Bytes pdkv wrote per transferred room.")
        self._room_blocks = histogram(name=_PREFIX + "room_blocks", labelnames=names,
                                      buckets=list(HISTOGRAM_BOUNDS["room_blocks"]),
                                      documentation="Blocks pdkv wrote per transferred room.")
        # Children exist from the start, so the families are on /metrics at 0.
        for values in self.per_engine_labelvalues.values():
            for outcome in ("success", "failed"):
                self._rooms.labels(*values, outcome)
            for stage in STAGES:
                self._stage.labels(*values, stage)
            self._bytes.labels(*values)
            self._blocks.labels(*values)
            self._room_bytes.labels(*values)
            self._room_blocks.labels(*values)

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0):
        data = transfer_stats_data or {}
        values = list(self.per_engine_labelvalues[engine_idx])
        for key, outcome in (("rooms_succeeded", "success"), ("rooms_failed", "failed")):
            if data.get(key):
                self._rooms.labels(*values, outcome).inc(data[key])
        if data.get("bytes_written"):
            self._bytes.labels(*values).inc(data["bytes_written"])
        if data.get("blocks_written"):
            self._blocks.labels(*values).inc(data["blocks_written"])
        for key, n in data.items():
            if key.startswith("failures/") and n:
                self._failures.labels(*values, key.split("/", 1)[1]).inc(n)
        for name, bounds in HISTOGRAM_BOUNDS.items():
            counts = [data.get(f"hist/{name}/{i}", 0) for i in range(len(bounds) + 1)]
            if not any(counts):
                continue
            if name.startswith("stage:"):
                child = self._stage.labels(*values, name.split(":", 1)[1])
            else:
                child = (self._room_bytes if name == "room_bytes" else
                         self._room_blocks).labels(*values)
            for value, n in bucket_values(bounds, counts, data.get(f"hist/{name}/sum", 0.0)):
                for _ in range(int(n)):
                    child.observe(value)
