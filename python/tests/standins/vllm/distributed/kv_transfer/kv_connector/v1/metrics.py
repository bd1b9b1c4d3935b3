"""Stand-in for vllm/distributed/kv_transfer/kv_connector/v1/metrics.py: KVConnectorStats."""
from dataclasses import dataclass, field
from typing import Any


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
