"""Stand-in for vllm.v1.core.sched.output: NewRequestData, CachedRequestData and
SchedulerOutput with upstream's fields, in upstream's order, with upstream's defaults
(the commit is in upstream_signatures.json), plus ``has_sync_kv_loads``, which the newer
model-runner mixin reads. Data only: the replays fill them as vLLM's scheduler does
(vllm_objects.py)."""
import dataclasses
from typing import Any, Optional


@dataclasses.dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: Optional[list[int]]
    mm_features: list[Any]
    sampling_params: Any
    pooling_params: Any
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int
    lora_request: Any
    prompt_embeds: Any = None
    prefill_token_ids: Optional[list[int]] = None


@dataclasses.dataclass
class CachedRequestData:
    req_ids: list[str]
    # upstream: for these requests new_block_ids replace (not extend) their block ids
    resumed_req_ids: set[str]
    new_token_ids: list[list[int]]
    all_token_ids: dict[str, list[int]]
    new_block_ids: list[Optional[tuple[list[int], ...]]]
    num_computed_tokens: list[int]
    num_output_tokens: list[int]

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)

    @classmethod
    def make_empty(cls) -> "CachedRequestData":
        return cls([], set(), [], {}, [], [], [])


@dataclasses.dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]]
    scheduled_encoder_inputs: dict[str, list[int]]
    num_common_prefix_blocks: list[int]
    finished_req_ids: set[str]
    free_encoder_mm_hashes: list[str]
    preempted_req_ids: Optional[set[str]] = None
    pending_structured_output_tokens: bool = False
    kv_connector_metadata: Any = None
    ec_connector_metadata: Any = None
    # read by the model-runner mixin: start_load_kv goes before the forward only then
    has_sync_kv_loads: bool = False

    @classmethod
    def make_empty(cls) -> "SchedulerOutput":
        return cls([], CachedRequestData.make_empty(), {}, 0, {}, {}, [], set(), [])
