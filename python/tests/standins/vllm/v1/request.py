"""Stand-in for vllm.v1.request: RequestStatus and the Request fields connectors read."""
import enum
from typing import Any, Optional


class RequestStatus(enum.IntEnum):
    WAITING = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()


class Request:
    def __init__(self, request_id: str, prompt_token_ids: list[int],
                 kv_transfer_params: Optional[dict[str, Any]] = None):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.num_computed_tokens = 0
        self.kv_transfer_params = kv_transfer_params
        self.status = RequestStatus.WAITING
