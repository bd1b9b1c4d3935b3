"""Stand-in for vllm/distributed/kv_transfer/kv_connector/v1/base.py: the abstract
interface only (signatures from upstream_signatures.json), no behaviour beyond what the
base class itself implements: the metadata binding, requires_kv_delivery (the producer
role) and KVConnectorTransferResults, the result of get_transfer_results, which newer
model runners call instead of get_finished (its fields as the model-runner mixin reads
them). SupportsHMA marks a connector that takes a request's blocks per KV cache group:
vLLM's scheduler then calls request_finished_all_groups (a list per group) instead of
request_finished, and keeps its hybrid KV cache manager on."""
import dataclasses
import enum
from abc import ABC, abstractmethod
from typing import Any, Optional


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata(ABC):  # noqa: B024
    pass


class SupportsHMA(ABC):
    @abstractmethod
    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]):
        raise NotImplementedError


def supports_hma(connector) -> bool:
    if isinstance(connector, type):
        return issubclass(connector, SupportsHMA)
    return isinstance(connector, SupportsHMA)


@dataclasses.dataclass
class KVConnectorTransferResults:
    # upstream: a failed receive is in finished_recving too (the request must leave the
    # waiting state); failed_recving says which
    finished_sending: set[str] = dataclasses.field(default_factory=set)
    finished_recving: set[str] = dataclasses.field(default_factory=set)
    failed_recving: set[str] = dataclasses.field(default_factory=set)
    prefix_replay_checkpoints: dict = dataclasses.field(default_factory=dict)


class KVConnectorBase_V1(ABC):
    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config):
        self._connector_metadata: Optional[KVConnectorMetadata] = None
        self._vllm_config = vllm_config
        if vllm_config.kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._kv_cache_config = kv_cache_config
        self._role = role

    @property
    def role(self) -> KVConnectorRole:
        return self._role

    @property
    def requires_kv_delivery(self) -> bool:
        # upstream: a request preempted while its hand-off is pending is recomputed
        # (its stale output dropped) instead of finishing on freed blocks
        return self._kv_transfer_config.is_kv_producer

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._connector_metadata = None

    def _get_connector_metadata(self) -> KVConnectorMetadata:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def register_kv_caches(self, kv_caches: dict) -> None:
        return

    @abstractmethod
    def start_load_kv(self, forward_context, **kwargs: Any) -> None: ...

    @abstractmethod
    def wait_for_layer_load(self, layer_name: str) -> None: ...

    @abstractmethod
    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs: Any) -> None: ...

    @abstractmethod
    def wait_for_save(self): ...

    def get_finished(self, finished_req_ids: set[str]):
        return None, None

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        # Upstream's default body was not in the sources read: not modelled, so a replay
        # proves the connector's own override is what answers.
        raise NotImplementedError("stand-in: KVConnectorBase_V1.get_transfer_results")

    def get_block_ids_with_load_errors(self) -> set[int]:
        return set()

    def shutdown(self):
        return None

    def get_kv_connector_stats(self):
        return None

    @abstractmethod
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int): ...

    @abstractmethod
    def update_state_after_alloc(self, request, blocks, num_external_tokens: int): ...

    @abstractmethod
    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata: ...

    def on_new_request(self, request) -> None:
        return

    def update_connector_output(self, connector_output):
        return

    def request_finished(self, request, block_ids):
        return False, None

    def has_pending_push_work(self) -> bool:
        return False

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config):
        if cls is KVConnectorBase_V1:
            raise TypeError("get_required_kvcache_layout called on the abstract base class")
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict) -> bool:
        return False

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict] = None):
        return None

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames,
                           per_engine_labelvalues):
        return None
