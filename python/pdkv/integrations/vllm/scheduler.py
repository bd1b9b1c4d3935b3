"""Scheduler side of PdkvConnector: decides which blocks move, per request.

Runs in vLLM's scheduler process (one per instance). Prefill (kv_producer): a request
carrying ``do_remote_decode`` gets a room when its blocks are allocated; its pages are
pushed either as its chunks are computed (``layerwise``: each step's full pages) or all
at once when it finishes; ``request_finished`` keeps its blocks until the workers report
the push ended and returns the parameters the decode needs. Decode (kv_consumer): a
request carrying ``do_remote_prefill`` loads every prompt token it does not hold yet,
asynchronously; its blocks go to the workers as the destination pages.

Preemption (prefill): vLLM frees a preempted request's blocks, puts it back in the
waiting queue and, when it resumes, allocates new blocks and calls
update_state_after_alloc again (a producer request is never allocated twice otherwise,
so that second call is the resume, whether or not SchedulerOutput.preempted_req_ids
said so). The request keeps its room through the preemption while pdkv holds none of its
pages (the whole-prompt push, or layerwise before its first full page): the pages go out
from the new blocks when it finishes. Pages already handed to pdkv were read from blocks
the preemption freed, so that room fails (its queued writes are dropped, none can land
later) and the resumed request opens a fresh room; the decode learns the room only from
request_finished's parameters, so no decode waits on the failed one.

Reports (decode): a load reaches vLLM once per worker, in finished_recving, whether it
landed, failed (its blocks then also in the load errors) or was aborted mid-flight:
vLLM frees an aborted load's held blocks when it shows up in finished_recving, and a
second report of the same request (finished_sending after finished_recving, as an abort
racing the load's end under asynchronous scheduling would give) hits the scheduler's
assertion that the request still exists.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

from pdkv.integrations.rooms import RoomTable, room_hash
from pdkv.integrations.vllm import params as P
from pdkv.integrations.vllm.groups import GroupLayout, truncate_prompt
from pdkv.integrations.vllm.metadata import PdkvConnectorMetadata, RecvRequest, SendChunk

log = logging.getLogger("pdkv.vllm")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass
class _Sending:
    request: Any
    room: Optional[int]  # None: failed at a preemption, a fresh one opens on resume
    blocks: list[int]  # the primary group's
    num_blocks_total: int
    per_group: tuple = ()  # every group's blocks (hybrid models), for the state lists
    blocks_sent: int = 0
    # vLLM freed the blocks (preempted) and has not allocated new ones yet
    preempted: bool = False
    restarts: int = 0  # rooms failed at preemptions (salts the next room)


class SchedulerSide:
    def __init__(self, block_size: int, bootstrap_addr: str, instance_id: str,
                 layerwise: bool, is_producer: bool, is_consumer: bool,
                 trusted_bootstrap_addrs=(), groups: Optional[GroupLayout] = None,
                 tp_size: Optional[int] = None):
        self._groups = groups or GroupLayout.single(block_size)
        self._tp_size = tp_size
        block_size = self._groups.groups[self._groups.primary].block_size
        self._block_size = block_size
        self._bootstrap_addr = bootstrap_addr
        self._trust = P.BootstrapTrust(bootstrap_addr, trusted_bootstrap_addrs)
        self._layerwise = layerwise
        self._is_producer, self._is_consumer = is_producer, is_consumer
        self._rooms = RoomTable(instance_id)
        self._sending: dict[str, _Sending] = {}
        self._instance_id = instance_id
        self._loading: dict[str, tuple[int, str]] = {}  # decode: req id -> (room, addr)
        # decode: loads aborted mid-flight whose blocks vLLM holds until the workers
        # report them in finished_recving
        self._held: set[str] = set()
        self._meta = PdkvConnectorMetadata()

    # --- both roles -------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        params = P.checked(request, self._trust, self._bootstrap_addr)
        if self._is_consumer and params.get(P.DO_REMOTE_PREFILL) and self._can_load(params):
            count = self._remote_tokens(request, params) - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def on_new_request(self, request) -> None:
        """Prefill of a model with a Mamba group: the prompt loses its last token (the
        decode recomputes it from the state after N-1 tokens; groups.py)."""
        params = request.kv_transfer_params
        if self._is_producer and isinstance(params, dict) and params.get(P.DO_REMOTE_DECODE) \
                and self._groups.has_mamba:
            truncate_prompt(request)

    def _remote_tokens(self, request, params: dict) -> int:
        """Prompt tokens whose KV comes from the prefill: what it says it computed, else
        what a prefill of this model computes."""
        tokens = params.get(P.NUM_TOKENS)
        if isinstance(tokens, int) and 0 < tokens <= request.num_prompt_tokens:
            return tokens
        return self._groups.remote_token_count(request.num_prompt_tokens)

    def _can_load(self, params: dict) -> bool:
        """False (the decode computes the prompt itself) where the prefill's state could
        not land right: between different TP sizes, a Mamba state type whose page pdkv
        cannot split by TP rank (mamba_state.py; vLLM's NIXL connector refuses the same)."""
        peer_tp = params.get(P.TP_SIZE)
        if not self._groups.mamba_splits_by_tp and self._tp_size and \
                isinstance(peer_tp, int) and peer_tp != self._tp_size:
            log.warning("pdkv: prefill TP %d != decode TP %d with a Mamba state type that "
                        "does not split by TP rank: computing the prompt locally", peer_tp,
                        self._tp_size)
            return False
        return True

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        params = P.checked(request, self._trust, self._bootstrap_addr)
        if self._is_consumer and params.get(P.DO_REMOTE_PREFILL):
            self._start_receiving(request, params, blocks, num_external_tokens)
        elif self._is_producer and params.get(P.DO_REMOTE_DECODE):
            primary, per_group = self._groups.split(blocks.get_block_ids())
            state = self._sending.get(request.request_id)
            if state is not None:
                self._resume(state, primary, per_group)
                return
            room = self._assign_room(request.request_id, params.get(P.ROOM))
            state = _Sending(request, room, primary,
                             _cdiv(request.num_prompt_tokens, self._block_size), per_group)
            self._sending[request.request_id] = state
            self._meta.sends.append(SendChunk(request.request_id, room, [],
                                              state.num_blocks_total, open=True))

    def build_connector_meta(self, scheduler_output) -> PdkvConnectorMetadata:
        # Older vLLM leaves preempted_req_ids unset: the resume (update_state_after_alloc
        # again) then handles the preemption, before any new page is planned.
        for req_id in sorted(getattr(scheduler_output, "preempted_req_ids", None) or ()):
            self._preempt(req_id)
        if self._layerwise:
            self._plan_layerwise_chunks(scheduler_output)
        meta, self._meta = self._meta, PdkvConnectorMetadata()
        return meta

    def has_pending_push_work(self) -> bool:
        """vLLM keeps stepping while this is true (Scheduler.has_requests), even with no
        request left to schedule: a room of this instance still has pages to push or a
        status to report. True while a metadata entry waits for the next step (the
        whole-prompt chunk request_finished queued, an abort to deliver), while any
        prefill request holds a room the workers have not reported finished sending
        (its push or its end is still in flight), and while a decode holds the blocks
        of a load aborted mid-flight (finished_sending not reported yet)."""
        return bool(self._meta.sends or self._meta.recvs or self._sending or self._held)

    def update_connector_output(self, connector_output) -> None:
        for req_id in (connector_output.finished_sending or ()):
            self._sending.pop(req_id, None)
            self._held.discard(req_id)
            self._rooms.release(req_id)
        for req_id in (connector_output.finished_recving or ()):
            self._loading.pop(req_id, None)
            self._held.discard(req_id)

    def request_finished(self, request, block_ids) -> tuple[bool, Optional[dict]]:
        """Both of vLLM's hooks: request_finished (one group, a flat list) and, with its
        hybrid KV cache manager, request_finished_all_groups (a list per group)."""
        params = P.checked(request, self._trust, self._bootstrap_addr)
        req_id = request.request_id
        if self._is_consumer and params.get(P.DO_REMOTE_PREFILL):
            # Finished before its blocks were allocated (aborted while waiting): tell the
            # prefill, which holds its blocks for this room.
            params[P.DO_REMOTE_PREFILL] = False
            self._meta.recvs.append(RecvRequest(req_id, int(params[P.ROOM]),
                                                params.get(P.BOOTSTRAP_ADDR) or
                                                self._bootstrap_addr, [], abort=True))
            return False, None
        if req_id in self._loading:
            # Finished (aborted) while its KV is still landing: stop the prefill and keep
            # the blocks until the worker reports the room ended.
            room, addr = self._loading.pop(req_id)
            self._meta.recvs.append(RecvRequest(req_id, room, addr, [], abort=True,
                                                hold_blocks=True))
            self._held.add(req_id)
            return True, None
        state = self._sending.get(req_id)
        if state is None:
            return False, None
        from vllm.v1.request import RequestStatus
        if request.status != RequestStatus.FINISHED_LENGTH_CAPPED or state.preempted:
            # Aborted or stopped early: nothing complete to hand off. Or finished while
            # preempted (a vLLM without requires_kv_delivery may finish a request whose
            # last step was in flight at the preemption): its blocks are freed, so no
            # parameters go out and the decode computes the prompt itself. vLLM frees
            # the blocks now; the workers fail the room and do not report it.
            self._drop_room(req_id, state)
            del self._sending[req_id]
            return False, None
        primary, per_group = self._groups.split(block_ids) if block_ids else ([], ())
        blocks = primary or state.blocks
        per_group = per_group if primary else state.per_group
        if len(blocks) < state.num_blocks_total:
            raise ValueError(f"request {req_id}: {len(blocks)} blocks for "
                             f"{state.num_blocks_total} prompt pages")
        rest = blocks[state.blocks_sent:state.num_blocks_total]
        state_lists = None
        if self._groups.hybrid:
            # vLLM has just put its null block where sliding-window blocks were freed
            state_lists = self._groups.state_lists(per_group, request.num_prompt_tokens)
        if rest or state_lists is not None:
            self._meta.sends.append(SendChunk(req_id, state.room, rest, state.num_blocks_total,
                                              state_lists=state_lists))
            state.blocks_sent = state.num_blocks_total
        out = {P.DO_REMOTE_PREFILL: True, P.DO_REMOTE_DECODE: False,
               P.ROOM: state.room, P.BOOTSTRAP_ADDR: self._bootstrap_addr,
               P.NUM_BLOCKS: state.num_blocks_total, P.NUM_TOKENS: request.num_prompt_tokens}
        if self._tp_size:
            out[P.TP_SIZE] = self._tp_size
        return True, self._trust.sign(out)

    # --- helpers ----------------------------------------------------------------------
    def _preempt(self, req_id: str) -> None:
        """vLLM freed the request's blocks (they will be rewritten by others)."""
        state = self._sending.get(req_id)
        if state is None or state.preempted:
            return
        state.preempted = True
        state.blocks = []
        state.per_group = ()
        if state.blocks_sent:
            # pdkv holds pages read from the freed blocks: fail the room so none of
            # them is written anywhere; the resume opens a fresh room.
            self._drop_room(req_id, state)
            state.blocks_sent = 0
            state.restarts += 1

    def _resume(self, state: _Sending, blocks: list[int], per_group: tuple) -> None:
        """The preempted request is scheduled again, with these (new) blocks."""
        req_id = state.request.request_id
        self._preempt(req_id)  # a no-op when preempted_req_ids reported it already
        state.preempted = False
        state.blocks = list(blocks)
        state.per_group = per_group
        if state.room is None:
            state.room = self._fresh_room(req_id, state.restarts)
            self._meta.sends.append(SendChunk(req_id, state.room, [], state.num_blocks_total,
                                              open=True))

    def _assign_room(self, req_id: str, proposed) -> int:
        """The room a client proposed, or a fresh one when another live request holds it
        (a client can name any room: it must not fail the scheduler). The decode learns
        the room from request_finished's parameters, so a replaced one is still found."""
        try:
            return self._rooms.assign(req_id, proposed)
        except ValueError as e:
            log.warning("pdkv: request %s: %s; a fresh room is used", req_id, e)
            return self._rooms.assign(req_id)

    def _fresh_room(self, req_id: str, restarts: int) -> int:
        """A room no earlier attempt of this request used (the failed ones are
        remembered as failed by the prefill ranks)."""
        salt = restarts
        while True:
            try:
                return self._rooms.assign(req_id, room_hash(self._instance_id,
                                                            f"{req_id}\0restart {salt}"))
            except ValueError:  # held by another live request: try the next salt
                salt += 1

    def _drop_room(self, req_id: str, state: _Sending) -> None:
        """The workers fail the request's room; nothing of it is reported back."""
        if state.room is not None:
            self._meta.sends.append(SendChunk(req_id, state.room, [], state.num_blocks_total,
                                              abort=True))
            self._rooms.release(req_id)
            state.room = None

    def _start_receiving(self, request, params: dict, blocks, num_external_tokens: int):
        params[P.DO_REMOTE_PREFILL] = False  # one transfer per request
        room = int(params[P.ROOM])
        addr = params.get(P.BOOTSTRAP_ADDR) or self._bootstrap_addr
        if num_external_tokens <= 0:
            # Everything is cached here already: release the prefill's blocks.
            self._meta.recvs.append(RecvRequest(request.request_id, room, addr, [], abort=True))
            return
        remote_tokens = self._remote_tokens(request, params)
        local_tokens = remote_tokens - num_external_tokens
        if local_tokens % self._block_size:
            raise ValueError(f"request {request.request_id}: local prefix of {local_tokens} "
                             f"tokens is not a multiple of the block size {self._block_size}")
        all_blocks, per_group = self._groups.split(blocks.get_block_ids())
        first = local_tokens // self._block_size
        last = _cdiv(remote_tokens, self._block_size)
        if len(all_blocks) < last:
            raise ValueError(f"request {request.request_id}: {len(all_blocks)} blocks "
                             f"allocated for {last} prompt pages")
        state_lists = None
        if self._groups.hybrid:
            state_lists = self._groups.state_lists(per_group, remote_tokens, local_tokens)
        self._meta.recvs.append(RecvRequest(request.request_id, room, addr,
                                            all_blocks[first:last], local_tokens,
                                            state_lists=state_lists))
        self._loading[request.request_id] = (room, addr)

    def _plan_layerwise_chunks(self, so) -> None:
        """The pages each tracked request completes in this step, sent as it runs."""
        scheduled = getattr(so, "num_scheduled_tokens", {}) or {}
        new_blocks: dict[str, list[int]] = {}
        for new in getattr(so, "scheduled_new_reqs", ()) or ():
            new_blocks[new.req_id] = self._groups.split(new.block_ids)[0]
        cached = getattr(so, "scheduled_cached_reqs", None)
        if cached is not None:
            for req_id, ids in zip(cached.req_ids, cached.new_block_ids):
                if ids is not None:
                    new_blocks[req_id] = new_blocks.get(req_id, []) + self._groups.split(ids)[0]
        for req_id, state in self._sending.items():
            if req_id not in scheduled or state.room is None or state.preempted:
                continue
            known = set(state.blocks)
            state.blocks.extend(b for b in new_blocks.get(req_id, ()) if b not in known)
            done = state.request.num_computed_tokens + scheduled[req_id]
            full = state.num_blocks_total if done >= state.request.num_prompt_tokens else \
                done // self._block_size
            full = min(full, len(state.blocks))
            if full > state.blocks_sent:
                self._meta.sends.append(SendChunk(req_id, state.room,
                                                  state.blocks[state.blocks_sent:full],
                                                  state.num_blocks_total, layerwise=True))
                state.blocks_sent = full
