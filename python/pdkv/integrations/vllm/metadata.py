"""What the scheduler-side connector tells the workers each step (pickled across
processes by vLLM, so plain data only)."""
from __future__ import annotations

import dataclasses
from typing import Optional

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata


@dataclasses.dataclass
class SendChunk:
    """Prefill: pages of one request to push. An empty chunk with ``open`` set creates the
    room (KVSender + init) before its first page is computed."""

    req_id: str
    room: int
    blocks: list[int]
    num_blocks_total: int
    open: bool = False
    layerwise: bool = False  # True: this step's forward writes these pages layer by layer
    abort: bool = False  # the request ended without a transfer: fail the room
    # hybrid models, on the last chunk: each pdkv state group's index list (groups.py)
    state_lists: Optional[list[list[int]]] = None


@dataclasses.dataclass
class RecvRequest:
    """Decode: the blocks a request's KV lands in (``abort``: none will, free the prefill)."""

    req_id: str
    room: int
    bootstrap_addr: str
    blocks: list[int]
    prefix_tokens: int = 0
    abort: bool = False
    # abort of a load in flight: vLLM holds the blocks until the worker reports the
    # request in finished_sending (the room has ended, nothing more will land)
    hold_blocks: bool = False
    # hybrid models: each pdkv state group's destination list (groups.py)
    state_lists: Optional[list[list[int]]] = None


@dataclasses.dataclass
class PdkvConnectorMetadata(KVConnectorMetadata):
    sends: list[SendChunk] = dataclasses.field(default_factory=list)
    recvs: list[RecvRequest] = dataclasses.field(default_factory=list)
