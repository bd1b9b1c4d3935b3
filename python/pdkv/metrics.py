"""pdkv's Prometheus metrics for an engine's own /metrics, or on one endpoint per process.

Every KV manager of the process (prefill and decode, any rank) is in one exposition, its
samples labelled ``role`` and ``rank``. Two ways to expose them:

* ``register(registry)``: a ``prometheus_client`` collector (Debian
  python3-prometheus-client) added to the engine's registry, so the engine's existing
  /metrics carries pdkv's families. Nothing listens on a port of pdkv's.
* ``serve(port)``: pdkv's own endpoint (GET /metrics, GET /health), one per process, shared
  by every manager (``PDKV_METRICS_PORT`` / ``Config.metrics_port`` start the same one).

The families (docs/CONFIG.md, "Metrics"): pdkv_rooms_total{outcome},
pdkv_room_failures_total{cause}, pdkv_room_stage_seconds{stage} (histogram),
pdkv_room_bytes / pdkv_room_blocks (histograms), pdkv_written_bytes_total,
pdkv_written_blocks_total, pdkv_queued_chunks, pdkv_active_rooms.
"""
from __future__ import annotations

from typing import Iterable, Optional

from pdkv import _native

__all__ = ["text", "PdkvCollector", "register", "serve", "MetricsEndpoint"]


def text() -> str:
    """The Prometheus text of every KV manager alive in this process."""
    return _native.process_metrics_text()


class PdkvCollector:
    """A prometheus_client collector yielding pdkv's families at each scrape."""

    def collect(self) -> Iterable:
        from prometheus_client.parser import text_string_to_metric_families

        return list(text_string_to_metric_families(text()))

    def describe(self) -> Iterable:
        # Nothing up front: the families exist once managers do, and describing them by
        # collecting would scrape at registration time.
        return []


def register(registry=None) -> PdkvCollector:
    """Adds a PdkvCollector to `registry` (default: prometheus_client.REGISTRY) and
    returns it (``registry.unregister(collector)`` removes it)."""
    if registry is None:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    collector = PdkvCollector()
    registry.register(collector)
    return collector


class MetricsEndpoint:
    """A handle on the process's pdkv endpoint; it stops when every handle (and every
    manager started with a metrics port) let go of it."""

    def __init__(self, host: str = "0.0.0.0", port: int = 0):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in [0, 65535], not {port!r}")
        self._handle: Optional[_native.MetricsEndpoint] = _native.MetricsEndpoint(host, port)

    @property
    def port(self) -> int:
        return self._handle.port if self._handle is not None else -1

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.stop()
            self._handle = None

    def __enter__(self) -> "MetricsEndpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(port: int = 0, host: str = "127.0.0.1") -> MetricsEndpoint:
    """Serves every manager of this process on `host`:`port` (0 = any free port, or the
    port already running); a different fixed port than the running one raises. Loopback
    by default, as PDKV_METRICS_HOST: /metrics tells whoever reads it about the cluster."""
    return MetricsEndpoint(host, port)
