"""What sglang's decode scheduler asks of a prefill instance, answered by pdkv's bootstrap.

sglang's decode (``DecodePreallocQueue``) resolves each request's prefill DP group itself
before it calls ``KVReceiver.init``: from ``kv_manager.prefill_info_table[addr]``
(``dp_size``, ``follow_bootstrap_room``), filled by ``try_ensure_parallel_info(addr)``,
and when the room does not say, by a ``POST /query_dp_ranks`` to the prefill's bootstrap
server. Here the table is filled from pdkv's own parallel info (``GET /route`` with
engine_rank and target_dp_group -1), and a prefill rank tells pdkv's bootstrap server
where each room went (``POST /register_dp_rank``), so the query has its answer.

``follow_bootstrap_room`` is reported False for an instance of several DP groups: a pdkv
prefill registers every room's DP group there, whatever sglang's load balancer did, so
the decode's query is always right (one HTTP request per room and rank-0 of a group).
"""
from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from typing import Optional

from pdkv.integrations.http_fetch import FetchError, fetch, json_object, positive_int

log = logging.getLogger("pdkv.sglang")
HTTP_TIMEOUT_S = 2.0
_MAX_PARALLEL = 1 << 16  # ranks or DP groups of one instance
_MAX_PAGE_SIZE = 1 << 20  # tokens per page
_MAX_STAGES = 64  # pipeline stages of one instance (the bootstrap server's bound)


@dataclasses.dataclass
class PrefillInstanceInfo:
    """The fields of sglang's ``PrefillServerInfo`` its decode scheduler reads."""
    attn_tp_size: int
    dp_size: int
    page_size: int
    follow_bootstrap_room: bool
    attn_cp_size: int = 1
    pp_size: int = 1
    # Pipeline stages: the KV buffers each stage's ranks registered, in stage order (what
    # a decode of one stage maps onto its own layers; pipeline.py).
    stage_kv_buffers: tuple = ()


def _stage_layout(bootstrap_addr: str, pp_rank: int) -> Optional[dict]:
    """The parallel info of one pipeline stage (pdkv's GET /route with engine_rank and
    target_dp_group -1), or None while it has no rank registered or cannot be reached."""
    stage = f"&target_pp_rank={pp_rank}" if pp_rank else ""
    try:
        answer = fetch("GET", bootstrap_addr, "/route?engine_rank=-1&target_dp_group=-1" + stage,
                       deadline_s=HTTP_TIMEOUT_S)
    except (FetchError, ValueError) as e:
        log.warning("pdkv: parallel info of prefill %s: %s", bootstrap_addr, e)
        return None
    if answer.status != 200:
        log.info("pdkv: parallel info of prefill %s stage %d not there yet (HTTP %d: %s)",
                 bootstrap_addr, pp_rank, answer.status,
                 answer.body[:200].decode(errors="replace"))
        return None
    return json_object(answer.body) or {}


def fetch_prefill_info(bootstrap_addr: str) -> Optional[PrefillInstanceInfo]:
    """One attempt (sglang calls this from its scheduler loop, so it must not block long);
    None while the instance (every pipeline stage of it) has no rank registered or cannot
    be reached."""
    info = _stage_layout(bootstrap_addr, 0)
    if info is None:
        return None
    # Whatever the server answered is checked before sglang's scheduler sees it: a
    # malformed answer is a failed query (None), as upstream treats one, never an
    # exception in the scheduler loop.
    dp = positive_int(info.get("prefill_dp_size"), _MAX_PARALLEL)
    tp = positive_int(info.get("prefill_tp_size"), _MAX_PARALLEL)
    page_size = positive_int(info.get("page_size"), _MAX_PAGE_SIZE)
    pp = positive_int(info.get("pp_size", 1), _MAX_STAGES)
    if dp is None or tp is None or page_size is None or pp is None or tp % dp:
        log.warning("pdkv: parallel info of prefill %s is malformed: %s", bootstrap_addr,
                    str(info)[:200])
        return None
    stage_kv_buffers = []  # read only where a decode of one stage needs them
    for stage in range(pp if pp > 1 else 0):
        layout = info if stage == 0 else _stage_layout(bootstrap_addr, stage)
        if layout is None:
            return None
        lens = layout.get("kv_item_lens")
        if not isinstance(lens, list) or not lens or len(lens) > _MAX_PARALLEL:
            log.warning("pdkv: parallel info of prefill %s stage %d lists no KV buffers",
                        bootstrap_addr, stage)
            return None
        stage_kv_buffers.append(len(lens))
    return PrefillInstanceInfo(attn_tp_size=tp // dp, dp_size=dp, page_size=page_size,
                               follow_bootstrap_room=dp == 1, pp_size=pp,
                               stage_kv_buffers=tuple(stage_kv_buffers))


class RoomPlacementReporter:
    """Tells a bootstrap server which DP group serves a room (``POST /register_dp_rank``),
    from one background thread: a prefill's scheduler must not wait on HTTP per request.
    The request goes through the manager's native bootstrap client, so it is signed with
    the cluster key when there is one (the server refuses unsigned writes then). A lost
    report leaves that room's decode asking until its bootstrap timeout fails it, with the
    reason logged here."""

    def __init__(self, mgr):
        self._mgr = mgr  # a pdkv.KVManager: its native side holds the cluster key
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def report(self, bootstrap_addr: str, room: int, dp_rank: int) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="pdkv-room-placement")
                self._thread.start()
        self._queue.put((bootstrap_addr, int(room), int(dp_rank)))

    def close(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join(timeout=HTTP_TIMEOUT_S * 2)
                self._thread = None

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            addr, room, dp_rank = item
            try:
                self._mgr._native.report_room_dp_rank(addr, room, dp_rank, HTTP_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - a background thread: log, go on
                log.error("pdkv: could not tell bootstrap %s room %d's DP group %d: %s",
                          addr, room, dp_rank, e)
