"""Worker side of PdkvConnector: one pdkv KVManager per TP rank, rooms per request.

Runs in each vLLM worker process. Prefill: opens a KVSender per request when the
scheduler assigns its room, pushes each chunk the scheduler hands over (with layerwise
streaming, marks a layer ready as vLLM saves it), and reports a request finished
sending once its room ended, Success or not, so vLLM frees its blocks. Decode: opens a
KVReceiver per request with its blocks as destination pages and reports it finished
receiving once its room ended; a failed room's blocks are reported as load errors, for
vLLM's ``kv_load_failure_policy`` (recompute or fail) to act on. A load aborted
mid-flight is reported finished receiving too, once, when its room ended (vLLM frees
the blocks it held then); one that this worker already reported is not reported again.

Call order: the prefill's chunks are handed to pdkv in ``begin_step`` (from
bind_connector_metadata, which every vLLM model runner calls before the forward), not in
start_load_kv, which newer runners call after the forward when no load is synchronous:
a layerwise chunk must be reserved before the forward's save_kv_layer calls, or every
layer would be marked only at wait_for_save and nothing would stream during the forward.

CUDA caches: pdkv reads a source only once the caller has synchronised (it takes no
stream), so before a prefill hands pdkv bytes the forward wrote (a layer in
save_kv_layer, the rest in wait_for_save, a whole chunk when it is sent) it waits for the
current stream of the caches' device. A decode needs no wait: its room ends, and
get_finished reports the request, only after the driver's copies into the cache landed.
"""
from __future__ import annotations

import logging
from typing import Optional

import pdkv
from pdkv.integrations import cuda_sync
from pdkv.integrations.settings import TransferSettings, make_kv_manager
from pdkv.integrations.memory import caches_memory
from pdkv.integrations.room_states import RoomStates
from pdkv.integrations.vllm.kv_args import flat_caches, kv_args_from_caches
from pdkv.integrations.vllm.layout import RankTopology
from pdkv.integrations.vllm.metadata import PdkvConnectorMetadata
from pdkv.integrations.vllm.stats import CounterDelta, PdkvConnectorStats

log = logging.getLogger("pdkv.vllm")
_TERMINAL = (pdkv.KVPoll.Success, pdkv.KVPoll.Failed)


class WorkerSide:
    def __init__(self, settings: TransferSettings, mode: str, topology_fn, groups=None):
        self._settings = settings
        self._groups = groups  # GroupLayout (None: one full-attention group)
        self._mode = mode  # "prefill" or "decode"
        self._topology_fn = topology_fn  # -> RankTopology, read when caches register
        self.mgr: Optional[pdkv.KVManager] = None
        self.layer_names: list[str] = []
        self._senders: dict[str, pdkv.KVSender] = {}
        self._receivers: dict[str, tuple[pdkv.KVReceiver, list[int]]] = {}
        self._finished_requests: set[str] = set()
        self._aborted_loads: dict[str, pdkv.KVReceiver] = {}  # decode: until they end
        self._load_errors: set[int] = set()
        self._layers_to_mark = 0
        self._delta = CounterDelta()
        self.failures: dict[str, str] = {}  # req id -> reason of rooms that failed
        self._cuda_device: Optional[int] = None  # the caches' GPU (None: host caches)

    def register_kv_caches(self, kv_caches) -> None:
        topology = self._topology_fn()
        args, self.layer_names = kv_args_from_caches(kv_caches, topology, self._groups)
        kind, device = caches_memory(flat_caches(kv_caches))
        self._cuda_device = device if kind == "cuda" else None
        # One /metrics endpoint per process: TP ranks on one host take metrics_port + rank.
        self.mgr = make_kv_manager(args, self._mode, self._settings,
                                   metrics_rank=topology.tp_rank)
        # get_finished runs every step over every request: it polls only the rooms that
        # changed (room_states.py).
        self._states = RoomStates(self.mgr)
        if self.mgr.metrics_port >= 0:
            log.info("pdkv: TP rank %d serves /metrics on port %d", topology.tp_rank,
                     self.mgr.metrics_port)

    def begin_step(self, meta: PdkvConnectorMetadata) -> None:
        """This step's metadata, before its forward: the prefill's chunks go to pdkv."""
        if self._mode == "prefill" and self._has_work(meta.sends):
            self._start_sends(meta)

    def start_load_kv(self, meta: PdkvConnectorMetadata) -> None:
        """The decode's loads start (before or after the forward: they land between steps)."""
        if self._mode == "decode" and self._has_work(meta.recvs):
            self._start_receives(meta)

    def _has_work(self, entries) -> bool:
        if entries and self.mgr is None:
            raise RuntimeError("KV transfer metadata before register_kv_caches")
        return bool(entries)

    def _start_sends(self, meta: PdkvConnectorMetadata) -> None:
        streaming = [c for c in meta.sends if c.layerwise and c.blocks]
        if streaming and self._settings.layerwise:
            # This step's forward writes these pages; pdkv streams each layer once
            # save_kv_layer marks it (one reservation per forward).
            self.mgr.reserve_layerwise_cache_steps()
            self._layers_to_mark = len(self.layer_names)
        for chunk in meta.sends:
            sender = self._senders.get(chunk.req_id)
            if chunk.open and sender is None:
                sender = pdkv.KVSender(self.mgr, self._settings.bootstrap_addr, chunk.room)
                sender.init(chunk.num_blocks_total)
                self._senders[chunk.req_id] = sender
            if sender is None:
                log.warning("pdkv: chunk for unknown request %s ignored", chunk.req_id)
                continue
            if chunk.abort:
                # The request ended without a hand-off (vLLM freed its blocks already):
                # fail the room and forget it; it is not reported as finished sending.
                sender.abort()
                self._states.forget(sender)
                del self._senders[chunk.req_id]
            elif chunk.blocks or chunk.state_lists is not None:
                layerwise = None if (chunk.layerwise and self._settings.layerwise) else False
                # Complete pages: pdkv's copies wait for the model's stream on the device.
                # Layerwise ones are read as save_kv_layer marks layers (host-synchronised).
                stream = self._model_stream() if layerwise is False else None
                sender.send(chunk.blocks, state_indices=chunk.state_lists, layerwise=layerwise,
                            stream=stream)

    def _start_receives(self, meta: PdkvConnectorMetadata) -> None:
        for req in meta.recvs:
            if req.hold_blocks:
                self._abort_load(req.req_id)
                continue
            receiver = pdkv.KVReceiver(self.mgr, req.bootstrap_addr, req.room)
            receiver.init()
            if req.abort:
                receiver.abort()
            else:
                receiver.send_metadata(req.blocks, state_indices=req.state_lists,
                                       decode_prefix_len=req.prefix_tokens or None)
            # An abort-only receiver (nothing to load) is not reported back: vLLM is not
            # waiting for it.
            if not req.abort:
                self._receivers[req.req_id] = (receiver, list(req.blocks))

    def _abort_load(self, req_id: str) -> None:
        """The request ended while loading: its room fails (the prefill stops); it is
        reported finished receiving once the room ended (nothing lands after that)."""
        entry = self._receivers.pop(req_id, None)
        if entry is not None:
            entry[0].abort()
            self._states.forget(entry[0])
            self._aborted_loads[req_id] = entry[0]
        # else: this worker reported it already (the load ended before the abort came);
        # vLLM frees the blocks on that report, so a second one would name a request
        # it no longer has.

    def _model_stream(self):
        """The stream the model writes CUDA caches on (None for host caches)."""
        if self._cuda_device is None:
            return None
        return cuda_sync.current_stream(self._cuda_device)

    def _wait_for_model(self) -> None:
        """The forward's writes to CUDA caches are done before pdkv reads them."""
        if self._cuda_device is not None:
            cuda_sync.synchronize_current_stream(self._cuda_device)

    def save_kv_layer(self) -> None:
        if self._layers_to_mark > 0:
            self._wait_for_model()
            self.mgr.mark_layers_ready(1)
            self._layers_to_mark -= 1

    def wait_for_save(self) -> None:
        # Layers the forward did not save through us (none normally) still count, so the
        # reservation never waits for a layer that will not come.
        if self._layers_to_mark > 0:
            self._wait_for_model()
            self.mgr.mark_layers_ready(self._layers_to_mark)
            self._layers_to_mark = 0

    def get_finished(self, finished_req_ids: set[str]):
        sending: set[str] = set()
        recving: set[str] = set()
        self._finished_requests |= set(finished_req_ids)
        for req_id in list(self._senders):
            if req_id not in self._finished_requests:
                continue  # vLLM frees blocks only of requests it has finished
            sender = self._senders[req_id]
            if self._states.poll(sender) in _TERMINAL:
                self._note_failure(req_id, sender)
                del self._senders[req_id]
                self._finished_requests.discard(req_id)
                sending.add(req_id)
        for req_id, receiver in list(self._aborted_loads.items()):
            if self._states.poll(receiver) in _TERMINAL:
                del self._aborted_loads[req_id]
                recving.add(req_id)
        for req_id in list(self._receivers):
            receiver, blocks = self._receivers[req_id]
            state = self._states.poll(receiver)
            if state in _TERMINAL:
                if state == pdkv.KVPoll.Failed and blocks:
                    self._load_errors.update(blocks)
                self._note_failure(req_id, receiver)
                del self._receivers[req_id]
                recving.add(req_id)
        return (sending or None), (recving or None)

    def _note_failure(self, req_id: str, room) -> None:
        try:
            room.failure_exception()
        except pdkv.KVTransferError as e:
            self.failures[req_id] = str(e)
            log.warning("pdkv: request %s: %s", req_id, e)

    def take_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def stats(self) -> Optional[PdkvConnectorStats]:
        if self.mgr is None:
            return None
        stats = PdkvConnectorStats(data=self._delta.take(self.mgr.metrics()))
        return None if stats.is_empty() else stats

    def shutdown(self) -> None:
        if self.mgr is not None:
            self.mgr.shutdown()
            self.mgr = None
