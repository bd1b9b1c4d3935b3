"""Stand-in for vllm.v1.core.sched.output: the SchedulerOutput fields connectors read."""
import dataclasses
from typing import Optional


@dataclasses.dataclass
class NewRequestData:
    req_id: str
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int


@dataclasses.dataclass
class CachedRequestData:
    req_ids: list[str]
    new_block_ids: list[Optional[tuple[list[int], ...]]]
    num_computed_tokens: list[int]
    # upstream: new_block_ids replace (not extend) the blocks of these requests
    resumed_req_ids: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    finished_req_ids: set[str] = dataclasses.field(default_factory=set)
    preempted_req_ids: Optional[set[str]] = None


@dataclasses.dataclass
class KVConnectorOutput:  # lives in vllm.v1.outputs upstream; kept here to stay small
    finished_sending: Optional[set[str]] = None
    finished_recving: Optional[set[str]] = None
