"""sglang's disaggregation classes over pdkv: manager, sender, receiver, bootstrap server.

They subclass sglang's ``BaseKVManager`` / ``BaseKVSender`` / ``BaseKVReceiver`` /
``BaseKVBootstrapServer`` and accept the keywords sglang's schedulers pass. pdkv's own
API mirrors these classes, so most methods forward one call; what differs is said where.
Settings: the ``PDKV_*`` environment (docs/CONFIG.md), read when each manager starts.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import List, Optional

from sglang.srt.disaggregation.base.conn import (BaseKVBootstrapServer, BaseKVManager,
                                                  BaseKVReceiver, BaseKVSender,
                                                  KVTransferMetric)

import pdkv
from pdkv.integrations.room_states import RoomStates
from pdkv.integrations.settings import TransferSettings, make_kv_manager
from pdkv.integrations.sglang.kvargs import kv_args_and_state
from pdkv.integrations.sglang.pipeline import (StagedReceiver, pp_size_of, stage_layer_counts,
                                               stage_view, without_aux)
from pdkv.integrations.sglang.prefill_info import (PrefillInstanceInfo, RoomPlacementReporter,
                                                   fetch_prefill_info)
from pdkv.integrations.sglang.state_layout import check_tp_with_prefill

log = logging.getLogger("pdkv.sglang")
_TERMINAL = (pdkv.KVPoll.Success, pdkv.KVPoll.Failed)


def _mode(disaggregation_mode) -> str:
    value = getattr(disaggregation_mode, "value", disaggregation_mode)
    if value not in ("prefill", "decode"):
        raise ValueError(f"disaggregation_mode must be prefill or decode, got {value!r}")
    return value


def own_bootstrap_addr(server_args) -> str:
    """Where this instance's bootstrap server listens, as its prefill ranks reach it:
    the host of ``dist_init_addr`` when set (multi-node), else ``host`` (0.0.0.0 -> loopback)."""
    host = server_args.host
    if getattr(server_args, "dist_init_addr", None):
        host = server_args.dist_init_addr.rsplit(":", 1)[0]
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"{host}:{int(server_args.disaggregation_bootstrap_port)}"


class PdkvKVManager(BaseKVManager):
    """One rank's pdkv KVManager, built from sglang's KVArgs and ServerArgs."""

    def __init__(self, args, disaggregation_mode, server_args, is_mla_backend: Optional[bool] = False,
                 **_newer_upstream_keywords):
        self.kv_args = args
        self.server_args = server_args
        self.is_mla_backend = bool(is_mla_backend)
        self.disaggregation_mode = disaggregation_mode
        self.mode = _mode(disaggregation_mode)
        settings = TransferSettings.from_mapping(
            {"backend": os.environ.get("PDKV_ENGINE_BACKEND") or "tcp"},
            default_bootstrap_addr=own_bootstrap_addr(server_args))
        # Pipeline stages (pipeline.py): the aux row travels between the last stages only.
        self.pp_size = pp_size_of(server_args)
        self.pp_rank = int(getattr(args, "pp_rank", 0) or 0)
        self.is_last_stage = self.pp_rank == self.pp_size - 1
        self.pdkv_args, self.state_layout = kv_args_and_state(
            args if self.is_last_stage else without_aux(args), server_args,
            self.is_mla_backend, self.mode)
        # One /metrics endpoint per process: a fixed PDKV_METRICS_PORT is offset by the
        # rank's index on the instance (attention TP rank + attention TP size x system
        # DP rank), so the ranks of one host do not clash.
        rank = self.pdkv_args.engine_rank + self.pdkv_args.tp_size * int(
            getattr(args, "system_dp_rank", 0) or 0)
        self.mgr = make_kv_manager(self.pdkv_args, self.mode, settings, metrics_rank=rank)
        self._settings, self._metrics_rank = settings, rank
        # A decode of one stage: a pdkv manager per stage of each prefill stage split met.
        self._stage_managers: dict[tuple, list] = {}
        self._stage_lock = threading.Lock()
        if self.mgr.metrics_port >= 0:
            log.info("pdkv: rank %d serves /metrics on port %d", rank, self.mgr.metrics_port)
        self.kv_bytes_per_page = sum(self.pdkv_args.kv_item_lens)
        # Read by sglang's prefill scheduler (sglang's FakeKVManager defines it too): pdkv
        # skips a decode's prefix pages itself, so the scheduler sees none.
        self.req_to_decode_prefix_len: dict = {}
        # Read by sglang's decode scheduler for every request (prefill_info.py).
        self.prefill_info_table: dict[str, PrefillInstanceInfo] = {}
        self.room_placement = RoomPlacementReporter(self.mgr)
        # sglang polls every queued request every step: answered from the rooms that
        # changed (room_states.py).
        self.room_states = RoomStates(self.mgr)

    def try_ensure_parallel_info(self, bootstrap_addr: str) -> bool:
        """sglang's decode calls this (one attempt, from its scheduler loop) before it
        resolves a request's prefill DP group: True once ``prefill_info_table`` holds the
        instance. A page size other than this rank's is refused as sglang refuses it."""
        if bootstrap_addr in self.prefill_info_table:
            return True
        info = fetch_prefill_info(bootstrap_addr)
        if info is None:
            return False
        if info.page_size != self.pdkv_args.page_size:
            raise RuntimeError(f"page size mismatch: prefill {bootstrap_addr} has page_size "
                               f"{info.page_size}, this decode {self.pdkv_args.page_size}; "
                               "both must use the same --page-size")
        check_tp_with_prefill(self.state_layout, self.pdkv_args.tp_size, info.attn_tp_size,
                              bootstrap_addr)
        if info.pp_size != self.pp_size and self.pp_size != 1:
            raise RuntimeError(f"prefill {bootstrap_addr} has pp_size {info.pp_size}, this "
                               f"decode {self.pp_size}: a decode's pp_size must be the "
                               "prefill's or 1, as sglang's disaggregation backends require")
        if info.pp_size > 1 and self.pp_size == 1:
            self.stage_managers(info)
        self.prefill_info_table[bootstrap_addr] = info
        return True

    def stage_managers(self, info: PrefillInstanceInfo) -> list:
        """The pdkv managers of a decode of one stage for a prefill of ``info.pp_size``
        stages, one per prefill stage, each registering this rank's buffers of that
        stage's layers (aux with the last); made on first use, kept for the manager's
        life (one set per stage split met)."""
        with self._stage_lock:
            managers = self._stage_managers.get(info.stage_kv_buffers)
            if managers is not None:
                return managers
            is_mla = self.pdkv_args.is_mla
            counts = stage_layer_counts(info.stage_kv_buffers, is_mla)
            total = len(self.kv_args.kv_data_ptrs) // (1 if is_mla else 2)
            if sum(counts) != total:
                raise RuntimeError(f"the prefill's stages hold {counts} KV layers "
                                   f"({sum(counts)}), this decode {total}: both must serve "
                                   "the same model")
            managers, first = [], 0
            try:
                for stage, layers in enumerate(counts):
                    view = stage_view(self.kv_args, first, layers, is_mla,
                                      keep_aux=stage == len(counts) - 1)
                    stage_args, _ = kv_args_and_state(view, self.server_args,
                                                      self.is_mla_backend, self.mode,
                                                      stage=(stage, len(counts)))
                    managers.append(make_kv_manager(stage_args, self.mode, self._settings,
                                                    metrics_rank=self._metrics_rank))
                    first += layers
            except Exception:
                for m in managers:
                    m.shutdown()
                raise
            self._stage_managers[info.stage_kv_buffers] = managers
            return managers

    def submit_prefill_recompute(self, kv_receiver, payload: dict) -> None:
        """sglang's PD retraction asks the prefill to compute a retracted request again
        into the same room. pdkv does not re-open a room that ended, so the request fails
        through sglang's usual path (KVPoll.Failed, then the client's error), as sglang's
        own backends fail it when they cannot reach the prefill."""
        kv_receiver.fail("pdkv does not recompute a "
                         "retracted request on its prefill (PD retraction rebootstrap); "
                         f"request {payload.get('rid')!r} fails instead")

    def register_to_bootstrap(self):
        """Nothing to do: a pdkv prefill rank registers when its manager starts and again
        every PDKV_BOOTSTRAP_REFRESH_S, so a restarted bootstrap server relearns it."""

    def shutdown(self):
        self.room_placement.close()
        with self._stage_lock:
            staged = [m for managers in self._stage_managers.values() for m in managers]
            self._stage_managers.clear()
        for m in staged:
            m.shutdown()
        self.mgr.shutdown()


class PdkvKVSender(BaseKVSender):
    def __init__(self, mgr: PdkvKVManager, bootstrap_addr: str, bootstrap_room: int,
                 dest_tp_ranks: Optional[List[int]] = None, pp_rank: int = 0,
                 req_has_disagg_prefill_dp_rank: bool = False, **_newer_upstream_keywords):
        # dest_tp_ranks / pp_rank: pdkv resolves the decode ranks of a room itself, from
        # the pre-allocations that reach it.
        self.kv_mgr = mgr
        self.bootstrap_room = int(bootstrap_room)
        self._sender = pdkv.KVSender(mgr.mgr, bootstrap_addr, self.bootstrap_room)
        args = mgr.pdkv_args
        # Where this room went, for sglang decodes that ask instead of computing
        # room % dp_size (prefill_info.py); once per DP group, by its first rank. A request
        # that names its prefill DP group tells the decode itself.
        if args.dp_size > 1 and args.engine_rank % args.tp_size == 0 and \
                mgr.pp_rank == 0 and not req_has_disagg_prefill_dp_rank:
            mgr.room_placement.report(bootstrap_addr, self.bootstrap_room,
                                      args.engine_rank // args.tp_size)
        self._started = time.monotonic()
        self._ended: Optional[float] = None
        self._pages_sent = 0

    def init(self, num_kv_indices: int, aux_index: Optional[int] = None):
        # Only the last pipeline stage samples, so only it sends the aux row.
        self._sender.init(num_kv_indices, aux_index if self.kv_mgr.is_last_stage else None)

    def send(self, kv_indices, state_indices: Optional[List] = None,
             token_position_offset: int = 0):
        """One chunk of page indices, in request order; on the last chunk, sglang's
        ``state_indices`` (one list or None per state type), which pdkv sends after the KV.

        ``token_position_offset`` (the request position of the chunk's first token) is
        accepted and ignored, which is correct for the pools this adapter carries. In
        sglang it is read by backends that map token positions onto slots other than the
        KV pages: DeepSeek-V4's compressed-MLA pools (a C4/C128 slot per 4/128 token
        positions, picked by position) and context-parallel slicing of a chunk. For
        paged MHA/MLA pools the page indices alone name the bytes, and pdkv places a
        chunk by counting the pages sent before it (chunks arrive in order, and a
        decode's prefix pages are skipped by pdkv itself). kv_args_from_sglang refuses
        compressed-MLA pools (``mla_compression_ratios``) and context parallelism
        (``dcp_size`` or ``attn_cp_size`` > 1), the cases where the offset would matter."""
        groups = self.kv_mgr.state_layout.group_indices(state_indices)
        if groups is None:
            self._sender.send(kv_indices)
        else:
            self._sender.send(kv_indices, state_indices=groups)
        self._pages_sent += len(kv_indices)

    def poll(self) -> int:
        state = self.kv_mgr.room_states.poll(self._sender)
        if state in _TERMINAL and self._ended is None:
            self._ended = time.monotonic()
        return int(state)

    def failure_exception(self):
        self._sender.failure_exception()

    def get_transfer_metric(self) -> KVTransferMetric:
        """Latency from this sender's creation to the room's end as seen by poll(), and
        the bytes this rank pushed (its own pages of every KV buffer)."""
        latency = None if self._ended is None else self._ended - self._started
        return KVTransferMetric(transfer_latency_s=latency, alloc_latency_s=None,
                                transfer_total_bytes=self._pages_sent * self.kv_mgr.kv_bytes_per_page)

    def clear(self):
        self._sender.clear()

    def abort(self):
        self._sender.abort()
        self.kv_mgr.room_states.forget(self._sender)


class PdkvKVReceiver(BaseKVReceiver):
    def __init__(self, mgr: PdkvKVManager, bootstrap_addr: str,
                 bootstrap_room: Optional[int] = None, prefill_dp_rank: Optional[int] = None,
                 **_newer_upstream_keywords):
        if bootstrap_room is None:
            raise ValueError("pdkv needs a bootstrap_room for every request")
        self.kv_mgr = mgr
        self.bootstrap_room = int(bootstrap_room)
        self.bootstrap_addr = bootstrap_addr
        # sglang's decode asks try_ensure_parallel_info(addr) before it makes a receiver.
        info = mgr.prefill_info_table.get(bootstrap_addr)
        if info is not None and info.pp_size > 1 and mgr.pp_size == 1:
            # A decode of one stage receives each prefill stage's layers (pipeline.py).
            self._receiver = StagedReceiver(mgr.stage_managers(info), bootstrap_addr,
                                            self.bootstrap_room)
        else:
            self._receiver = pdkv.KVReceiver(mgr.mgr, bootstrap_addr, self.bootstrap_room)
        self._prefill_dp_rank = prefill_dp_rank
        self._initialised = False
        self.require_staging = False  # read by sglang's decode poll loop: bytes land in place
        # sglang's decode reads this for every queued request: None while the handshake
        # runs, then the room's terminal state (Failed at once on abort), so a request
        # aborted before its handshake ended is still polled and leaves the queue.
        self.conclude_state: Optional[int] = None
        self._failure: Optional[str] = None

    def init(self, prefill_dp_rank: Optional[int] = None):
        rank = self._prefill_dp_rank if prefill_dp_rank is None else prefill_dp_rank
        self._receiver.init(rank)
        self._initialised = True

    def fail(self, reason: str) -> None:
        """Ends the room as Failed with ``reason`` (what failure_exception raises)."""
        self._failure = reason
        self.abort()

    def send_metadata(self, kv_indices, aux_index: Optional[int] = None,
                      state_indices: Optional[List] = None,
                      decode_prefix_len: Optional[int] = None):
        groups = self.kv_mgr.state_layout.group_indices(state_indices)
        if not self._initialised:  # older sglang resolved the route in the constructor
            self.init()
        extra = {} if groups is None else {"state_indices": groups}
        if not self.kv_mgr.is_last_stage:
            aux_index = None  # the aux row goes to the last stage, which samples
        self._receiver.send_metadata(kv_indices, aux_index=aux_index,
                                     decode_prefix_len=decode_prefix_len, **extra)

    def poll(self) -> int:
        if isinstance(self._receiver, StagedReceiver):
            # Its rooms live on the stage managers, whose changes the rank's own feed does
            # not report: a kept state would never be refreshed.
            state = self._receiver.poll()
        else:
            state = self.kv_mgr.room_states.poll(self._receiver)
        if state in _TERMINAL:
            self.conclude_state = int(state)
        return int(state)

    def failure_exception(self):
        if self._failure is not None:
            raise pdkv.KVTransferError(self.bootstrap_room, self._failure)
        self._receiver.failure_exception()

    def clear(self):
        self._receiver.clear()

    def abort(self):
        self._receiver.abort()
        if not isinstance(self._receiver, StagedReceiver):
            self.kv_mgr.room_states.forget(self._receiver)
        self.conclude_state = int(pdkv.KVPoll.Failed)


class PdkvKVBootstrapServer(BaseKVBootstrapServer):
    """pdkv's HTTP bootstrap server where sglang starts its own (the prefill's HTTP
    server process, at ``--host`` / ``--disaggregation-bootstrap-port``).

    ``thread`` is what sglang's service supervises: one sglang version starts the server
    in a spawned child process, checks ``thread.is_alive()`` while it polls ``/health``
    and then blocks in ``thread.join()`` for the child's life. pdkv's server serves from
    native threads, so ``thread`` is a Python thread that lives exactly while the server
    serves: it ends when ``close()`` stops the server."""

    def __init__(self, host: str, port: int, **_newer_upstream_keywords):
        self._server = pdkv.BootstrapServer(host, int(port))
        self.port = self._server.port
        self._stopped = threading.Event()
        self.thread = threading.Thread(target=self._stopped.wait, daemon=True,
                                       name="pdkv-bootstrap-server")
        self.thread.start()

    def close(self):
        self._server.stop()
        self._stopped.set()
