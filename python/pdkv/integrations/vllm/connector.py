"""PdkvConnector: vLLM's KVConnectorBase_V1 over pdkv (push model).

vLLM builds it twice per instance: once with role SCHEDULER in the scheduler process,
once with role WORKER in each worker. Each call below is forwarded to the side that
role owns (scheduler.py / worker.py); a method called on the wrong role raises.
Settings come from ``kv_connector_extra_config`` (see ``TransferSettings``):
``bootstrap_addr`` (required), ``backend``, ``layerwise``, ``local_ip``, and the timeouts
``bootstrap_timeout_s``, ``waiting_timeout_s``, ``heartbeat_interval_s``,
``heartbeat_max_failures``, ``metrics_port`` (a fixed port P is rank r's P + r),
``verify_checksum``, and ``trusted_bootstrap_addrs`` (a decode without a cluster secret:
bootstrap servers besides its own that a request's parameters may name; params.py).
KV caches may be host-memory or CUDA tensors.

Hybrid models: the connector implements vLLM's ``SupportsHMA`` (its hybrid KV cache
manager stays on): a request's blocks come per KV cache group and every group moves
(groups.py says how). Layerwise streaming applies to single-group models; a hybrid
model's prefill pushes each request whole when its prompt is done.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                KVConnectorRole, SupportsHMA)

from pdkv.integrations.settings import TransferSettings
from pdkv.integrations.vllm.groups import GroupLayout
from pdkv.integrations.vllm.layout import RankTopology
from pdkv.integrations.vllm.scheduler import SchedulerSide
from pdkv.integrations.vllm.stats import PdkvConnectorStats
from pdkv.integrations.vllm.worker import WorkerSide

log = logging.getLogger("pdkv.vllm")
_ROLES = {"kv_producer": "prefill", "kv_consumer": "decode"}


def _on_cpu_platform() -> bool:
    """vLLM's CPU backend (CPU_ATTN) allocates (2, blocks, heads, block_size, dim)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def _topology(vllm_config) -> RankTopology:
    from vllm.distributed.parallel_state import (get_tensor_model_parallel_rank,
                                                 get_tensor_model_parallel_world_size)
    return RankTopology(get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size(),
                        vllm_config.model_config.get_total_num_kv_heads(),
                        block_size=vllm_config.cache_config.block_size,
                        heads_first=_on_cpu_platform())


def _groups(vllm_config, kv_cache_config) -> GroupLayout:
    block_size = vllm_config.cache_config.block_size
    if kv_cache_config is None:
        return GroupLayout.single(block_size)
    return GroupLayout.from_kv_cache_config(
        kv_cache_config, block_size,
        getattr(vllm_config.cache_config, "mamba_cache_mode", None))


def _tp_size(vllm_config):
    parallel = getattr(vllm_config, "parallel_config", None)
    return getattr(parallel, "tensor_parallel_size", None)


class PdkvConnector(KVConnectorBase_V1, SupportsHMA):
    """Disaggregated prefill/decode over pdkv: the prefill pushes into the decode's blocks."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        ktc = vllm_config.kv_transfer_config
        mode = _ROLES.get(ktc.kv_role)
        if mode is None:
            raise ValueError(f"PdkvConnector needs kv_role kv_producer (prefill) or "
                             f"kv_consumer (decode), got {ktc.kv_role!r}")
        self._settings = TransferSettings.from_mapping(ktc.kv_connector_extra_config or {})
        groups = _groups(vllm_config, kv_cache_config)
        if groups.hybrid and self._settings.layerwise:
            log.warning("pdkv: layerwise streaming applies to single-group models; this "
                        "model's %d KV cache groups are pushed whole per request",
                        len(groups.groups))
            self._settings = dataclasses.replace(self._settings, layerwise=False)
        self._scheduler: Optional[SchedulerSide] = None
        self._worker: Optional[WorkerSide] = None
        if role == KVConnectorRole.SCHEDULER:
            self._scheduler = SchedulerSide(vllm_config.cache_config.block_size,
                                            self._settings.bootstrap_addr, str(ktc.engine_id),
                                            self._settings.layerwise, mode == "prefill",
                                            mode == "decode",
                                            self._settings.trusted_bootstrap_addrs,
                                            groups, _tp_size(vllm_config))
        else:
            self._worker = WorkerSide(self._settings, mode, lambda: _topology(vllm_config),
                                      groups)

    def _sched(self) -> SchedulerSide:
        if self._scheduler is None:
            raise RuntimeError("scheduler-side method called on a worker connector")
        return self._scheduler

    def _work(self) -> WorkerSide:
        if self._worker is None:
            raise RuntimeError("worker-side method called on a scheduler connector")
        return self._worker

    # --- scheduler side ---------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        return self._sched().get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        self._sched().update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        return self._sched().build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output):
        self._sched().update_connector_output(connector_output)

    def request_finished(self, request, block_ids) -> tuple[bool, Optional[dict[str, Any]]]:
        return self._sched().request_finished(request, block_ids)

    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]) -> \
            tuple[bool, Optional[dict[str, Any]]]:
        """vLLM's hybrid KV cache manager: the request's blocks per KV cache group."""
        return self._sched().request_finished(request, block_ids)

    def on_new_request(self, request) -> None:
        self._sched().on_new_request(request)

    def has_pending_push_work(self) -> bool:
        # Push model: the whole-prompt chunk goes out and finished_sending comes back on
        # steps after the request's last forward, so vLLM must keep stepping until then.
        return self._scheduler is not None and self._scheduler.has_pending_push_work()

    # --- worker side ------------------------------------------------------------------
    def register_kv_caches(self, kv_caches):
        self._work().register_kv_caches(kv_caches)

    def bind_connector_metadata(self, connector_metadata) -> None:
        # Every vLLM model runner binds the step's metadata before the forward, while
        # start_load_kv comes before or (newer runners, asynchronous loads) after it:
        # the prefill's chunks must reach pdkv before the forward saves its layers.
        super().bind_connector_metadata(connector_metadata)
        self._work().begin_step(connector_metadata)

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        self._work().start_load_kv(self._get_connector_metadata())

    def wait_for_layer_load(self, layer_name: str) -> None:
        # Loads land between steps (push model): by the time a request is scheduled on
        # the decode, get_finished has reported its bytes complete.
        return None

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs: Any) -> None:
        self._work().save_kv_layer()

    def wait_for_save(self):
        self._work().wait_for_save()

    def get_finished(self, finished_req_ids: set[str]):
        return self._work().get_finished(finished_req_ids)

    def get_transfer_results(self, finished_req_ids: set[str]):
        """What newer vLLM model runners call instead of get_finished: the same report,
        as vLLM's KVConnectorTransferResults (pdkv names a failed load by its blocks, in
        get_block_ids_with_load_errors, and reports it finished receiving)."""
        from vllm.distributed.kv_transfer.kv_connector.v1.base import (
            KVConnectorTransferResults)
        sending, recving = self.get_finished(finished_req_ids)
        return KVConnectorTransferResults(finished_sending=sending or set(),
                                          finished_recving=recving or set())

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._work().take_load_errors()

    def get_kv_connector_stats(self) -> Optional[PdkvConnectorStats]:
        return self._worker.stats() if self._worker is not None else None

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict[str, Any]] = None):
        return PdkvConnectorStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames,
                           per_engine_labelvalues):
        """pdkv's families on vLLM's /metrics (pdkv.integrations.vllm.prom), fed by the
        stats the workers report; None with a vLLM that predates KVConnectorPromMetrics."""
        try:
            from pdkv.integrations.vllm.prom import PdkvPromMetrics
        except ImportError:
            return None
        return PdkvPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        # Layerwise streaming marks layers from Python between graph pieces.
        return bool((extra_config or {}).get("layerwise", False))

    def shutdown(self):
        if self._worker is not None:
            self._worker.shutdown()
