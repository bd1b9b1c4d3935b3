"""Stand-in for vllm.v1.request: RequestStatus as upstream (members, values, is_finished)
and the Request fields connectors read (upstream builds a Request from an engine request
and its SamplingParams; the replays set the same fields directly)."""
import enum
from typing import Any, Optional


class RequestStatus(enum.IntEnum):
    WAITING = enum.auto()
    WAITING_FOR_FSM = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    # upstream: anything after PREEMPTED is a finished status
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()

    @staticmethod
    def is_finished(status: "RequestStatus") -> bool:
        return status > RequestStatus.PREEMPTED


class Request:
    def __init__(self, request_id: str, prompt_token_ids: list[int],
                 kv_transfer_params: Optional[dict[str, Any]] = None):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.prompt_embeds = None
        # upstream: prompt and output tokens (a ConstantList view for readers)
        self._all_token_ids = list(self.prompt_token_ids)
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.max_tokens = 16
        self.num_computed_tokens = 0
        self.kv_transfer_params = kv_transfer_params
        self.status = RequestStatus.WAITING

    def is_finished(self) -> bool:
        return RequestStatus.is_finished(self.status)
