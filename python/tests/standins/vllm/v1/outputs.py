"""Stand-in for vllm.v1.outputs.KVConnectorOutput (fields, order and defaults as upstream
at the commit in upstream_signatures.json); what the model runner hands the scheduler."""
import dataclasses
from typing import Any, Optional


@dataclasses.dataclass
class KVConnectorOutput:
    finished_sending: Optional[set[str]] = None
    finished_recving: Optional[set[str]] = None
    kv_connector_stats: Any = None
    kv_cache_events: Any = None
    kv_connector_worker_meta: Any = None
    invalid_block_ids: set[int] = dataclasses.field(default_factory=set)
    expected_finished_count: int = 0
