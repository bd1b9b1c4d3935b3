"""Stand-in for the vllm.config objects the connector reads (fields as upstream)."""
import dataclasses
import uuid
from typing import Any, Optional


@dataclasses.dataclass
class KVTransferConfig:
    kv_connector: Optional[str] = None
    engine_id: Optional[str] = None
    kv_role: Optional[str] = None
    kv_connector_extra_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    kv_connector_module_path: Optional[str] = None

    def __post_init__(self):
        if self.engine_id is None:
            self.engine_id = str(uuid.uuid4())

    @property
    def is_kv_producer(self) -> bool:
        return self.kv_role in ("kv_producer", "kv_both")

    @property
    def is_kv_consumer(self) -> bool:
        return self.kv_role in ("kv_consumer", "kv_both")


@dataclasses.dataclass
class CacheConfig:
    block_size: int = 16
    mamba_cache_mode: str = "none"


@dataclasses.dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1


@dataclasses.dataclass
class ModelConfig:
    total_num_kv_heads: int = 1
    use_mla: bool = False

    def get_total_num_kv_heads(self) -> int:
        return self.total_num_kv_heads


@dataclasses.dataclass
class VllmConfig:
    kv_transfer_config: Optional[KVTransferConfig] = None
    cache_config: CacheConfig = dataclasses.field(default_factory=CacheConfig)
    model_config: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    parallel_config: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
