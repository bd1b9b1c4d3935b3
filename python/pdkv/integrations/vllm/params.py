"""The ``kv_transfer_params`` pdkv's connector reads and writes (the proxy sets the first).

prefill request:  {"do_remote_decode": true, "pdkv_room": <optional int>}
prefill response: {"do_remote_prefill": true, "do_remote_decode": false, "pdkv_room": R,
                   "pdkv_bootstrap_addr": "host:port", "pdkv_num_blocks": N,
                   "pdkv_num_tokens": T, "pdkv_tp_size": TP,
                   "pdkv_sig": "<hex>" (only under a cluster secret)}
                  (T: prompt tokens whose KV the prefill computed, N-1 for a model with
                  Mamba state; TP: the prefill's tensor-parallel size, when known)
decode request:   the prefill response, unchanged.

Whoever can reach an instance's HTTP port can write these parameters, so they are checked
before the scheduler acts on them (checked()): a malformed one would raise inside vLLM's
scheduler and end its engine core, and a bootstrap address a client picked would make the
decode connect wherever it says. A decode takes a transfer only from a bootstrap server it
trusts (BootstrapTrust): under a cluster secret, parameters a prefill of the cluster
signed; without one, its own bootstrap address and those listed in the connector's
``trusted_bootstrap_addrs``. Anything else is a request without remote KV: the decode
computes the prompt itself and the reason is logged; nothing raises.

Thread safety: BootstrapTrust is immutable after construction; checked() mutates only the
request it is given (the scheduler's thread owns it).
"""
from __future__ import annotations

import logging
from typing import Iterable, Optional

DO_REMOTE_DECODE = "do_remote_decode"
DO_REMOTE_PREFILL = "do_remote_prefill"
ROOM = "pdkv_room"
BOOTSTRAP_ADDR = "pdkv_bootstrap_addr"
NUM_BLOCKS = "pdkv_num_blocks"
NUM_TOKENS = "pdkv_num_tokens"
TP_SIZE = "pdkv_tp_size"
SIGNATURE = "pdkv_sig"

ROOM_LIMIT = 1 << 64  # rooms are unsigned 64-bit on the wire
PROPOSED_ROOM_LIMIT = 1 << 63  # a room a client proposes to a prefill: RoomTable's range
MAX_NUM_BLOCKS = 1 << 24  # prompt pages of one request: far past any context length
_MAX_ADDR_CHARS = 300
_SIGNED_AS = "pdkv vllm kv_transfer_params v1"  # a version, so a change of fields is seen

log = logging.getLogger("pdkv.vllm")


def _is_int(value, limit: int, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and least <= value < limit


def _host_port(addr) -> Optional[str]:
    """`addr` normalised ("host:port" as pdkv parses it) when well-formed, else None."""
    if not isinstance(addr, str) or not 0 < len(addr) <= _MAX_ADDR_CHARS or not addr.isascii():
        return None
    from pdkv import _native
    try:
        host, port = _native.parse_host_port(addr)
    except ValueError:
        return None
    if not 0 < port < 65536:
        return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _message(room: int, addr: str, num_blocks: int) -> bytes:
    return f"{_SIGNED_AS}\0{room}\0{addr}\0{num_blocks}".encode()


class BootstrapTrust:
    """Which bootstrap servers a decode loads KV from, and the prefill's signature.

    own_addr: the instance's configured bootstrap_addr. extra: more "host:port" trusted
    without a secret (``trusted_bootstrap_addrs``). The cluster secret is read as every
    pdkv component reads it (PDKV_SECRET_FILE); with one, signatures decide, not the
    list."""

    def __init__(self, own_addr: str, extra: Iterable[str] = ()):
        from pdkv import _native
        self._seal = _native.TransferParamsSeal({})
        allowed = [own_addr, *extra]
        self._allowed = frozenset(a for a in map(_host_port, allowed) if a is not None)

    @property
    def signed(self) -> bool:
        return self._seal.keyed

    def sign(self, params: dict) -> dict:
        """The prefill's response parameters, with SIGNATURE added under a secret."""
        if self._seal.keyed:
            params[SIGNATURE] = self._seal.mac(_message(
                params[ROOM], params[BOOTSTRAP_ADDR], params[NUM_BLOCKS])).hex()
        return params

    def refusal(self, params: dict, default_addr: str) -> Optional[str]:
        """Why a decode must not load these parameters' KV; None when it may."""
        room, blocks = params.get(ROOM), params.get(NUM_BLOCKS)
        if not _is_int(room, ROOM_LIMIT):
            return f"{ROOM} must be an integer in [0, 2^64), not {str(room)[:40]!r}"
        # The decode does not use the page count; it is checked when given, and needed
        # under a secret because the signature covers it.
        if (blocks is not None or self._seal.keyed) and not _is_int(blocks, MAX_NUM_BLOCKS + 1):
            return (f"{NUM_BLOCKS} must be an integer in [0, {MAX_NUM_BLOCKS}], "
                    f"not {str(blocks)[:40]!r}")
        given = params.get(BOOTSTRAP_ADDR)
        addr = _host_port(default_addr if given is None else given)
        if addr is None:
            return f"{BOOTSTRAP_ADDR} is not 'host:port': {str(given)[:80]!r}"
        if self._seal.keyed:
            sig = params.get(SIGNATURE)
            try:
                tag = bytes.fromhex(sig) if isinstance(sig, str) else b""
            except ValueError:
                tag = b""
            if given is None or not self._seal.verify(tag, _message(room, given, blocks)):
                return ("not signed by a prefill of this cluster (missing or wrong "
                        f"{SIGNATURE})")
            return None
        if addr not in self._allowed:
            return (f"bootstrap server {addr} is not trusted (trusted: "
                    f"{sorted(self._allowed)}; add it to trusted_bootstrap_addrs)")
        return None


def checked(request, trust: BootstrapTrust, default_addr: str) -> dict:
    """The request's kv_transfer_params, made safe for the scheduler to act on.

    Parameters that are no dict count as none. A remote prefill (decode side) that
    trust.refusal() refuses is turned off in place (DO_REMOTE_PREFILL false, so every
    later hook sees a request without remote KV), with the reason logged once. A room
    proposed to a prefill that is no integer in [1, 2^63) is dropped (a fresh one is
    assigned), logged. Returns the (possibly corrected) parameters."""
    params = request.kv_transfer_params
    if not isinstance(params, dict):
        return {}
    if params.get(DO_REMOTE_PREFILL):
        why = trust.refusal(params, default_addr)
        if why is not None:
            params[DO_REMOTE_PREFILL] = False
            log.warning("pdkv: request %s: kv_transfer_params refused, the decode computes "
                        "the prompt itself: %s", request.request_id, why)
    if params.get(DO_REMOTE_DECODE) and params.get(ROOM) is not None and \
            not _is_int(params[ROOM], PROPOSED_ROOM_LIMIT, least=1):
        log.warning("pdkv: request %s: %s %r is no integer in [1, 2^63): a fresh room is "
                    "used", request.request_id, ROOM, str(params[ROOM])[:40])
        del params[ROOM]
    return params
