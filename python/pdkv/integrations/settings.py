"""Transfer settings an engine passes to pdkv, and the one place they become a KVManager.

Engines hand pdkv a flat mapping (vLLM: ``kv_connector_extra_config``; sglang: the
``PDKV_*`` environment). ``TransferSettings.from_mapping`` validates it;
``make_kv_manager`` turns it into ``pdkv.KVManager`` arguments plus the ``PDKV_*``
knobs the managers read when they start. Keeping that mapping in this one function lets
it switch to a ``pdkv.Config`` object later without touching the adapters.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Optional

from pdkv import _native

# Settings key -> the PDKV_* knob it sets (docs/CONFIG.md has each knob's range).
_ENV_KNOBS = {
    "bootstrap_timeout_s": "PDKV_BOOTSTRAP_TIMEOUT_S",
    "waiting_timeout_s": "PDKV_WAITING_TIMEOUT_S",
    "heartbeat_interval_s": "PDKV_HEARTBEAT_INTERVAL_S",
    "heartbeat_max_failures": "PDKV_HEARTBEAT_MAX_FAILURES",
    "metrics_port": "PDKV_METRICS_PORT",
    "verify_checksum": "PDKV_VERIFY_CHECKSUM",
}
_BACKENDS = ("auto", "tcp", "shm", "ucx", "cuda_ipc")


@dataclasses.dataclass(frozen=True)
class TransferSettings:
    """What an engine may set; everything else keeps pdkv's defaults (docs/CONFIG.md).

    ``bootstrap_addr`` ("host:port") is where prefill ranks register and, on a decode,
    the default route for requests that do not name their own. ``layerwise`` streams each
    layer as the forward writes it (prefill). ``knobs`` holds the ``PDKV_*`` values to set.
    """

    bootstrap_addr: str
    backend: str = "tcp"  # "auto": the fastest path per peer (README, "Which path when")
    layerwise: bool = False
    local_ip: Optional[str] = None
    knobs: tuple = ()
    trusted_bootstrap_addrs: tuple = ()

    @staticmethod
    def from_mapping(values: Mapping[str, Any], default_bootstrap_addr: str = "") -> \
            "TransferSettings":
        """Validates ``values``; an unknown key or a bad value raises ValueError."""
        known = {"bootstrap_addr", "backend", "layerwise", "local_ip", "trusted_bootstrap_addrs",
                 *_ENV_KNOBS}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown pdkv setting(s) {unknown}; known: {sorted(known)}")
        addr = str(values.get("bootstrap_addr") or default_bootstrap_addr)
        try:
            _native.parse_host_port(addr)
        except ValueError as e:
            raise ValueError(f"bootstrap_addr must be 'host:port', got {addr!r}: {e}") from None
        backend = str(values.get("backend", "tcp"))
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        layerwise = values.get("layerwise", False)
        if not isinstance(layerwise, bool):
            raise ValueError(f"layerwise must be true or false, got {layerwise!r}")
        knobs = []
        for key, env in _ENV_KNOBS.items():
            if key in values and values[key] is not None:
                value = values[key]
                if isinstance(value, bool):
                    value = "1" if value else "0"
                elif not isinstance(value, (int, float)):
                    raise ValueError(f"{key} must be a number, got {value!r}")
                knobs.append((env, str(value)))
        trusted = values.get("trusted_bootstrap_addrs") or []
        if not isinstance(trusted, (list, tuple)) or not all(isinstance(a, str) for a in trusted):
            raise ValueError("trusted_bootstrap_addrs must be a list of 'host:port', got "
                             f"{trusted!r}")
        for a in trusted:
            try:
                _native.parse_host_port(a)
            except ValueError as e:
                raise ValueError(f"trusted_bootstrap_addrs: {a!r} is not 'host:port': {e}") \
                    from None
        return TransferSettings(addr, backend, layerwise, values.get("local_ip"), tuple(knobs),
                                tuple(trusted))


def rank_metrics_port(base: int, rank: int) -> int:
    """The metrics port of rank ``rank`` when the engine gives ``base``.

    pdkv serves one /metrics endpoint per process (``PDKV_METRICS_PORT``), and an engine
    runs one process per TP rank with the same settings, so a fixed port would be bound
    by the first rank of a host and refused to the others. A fixed base ``P`` > 0 is
    therefore rank ``r``'s ``P + r``; -1 (off) and 0 (any free port, read back from
    ``KVManager.metrics_port``) are the same for every rank."""
    base, rank = int(base), int(rank)
    if base <= 0:
        return base
    port = base + rank
    if port > 65535:
        raise ValueError(f"metrics port {base} + rank {rank} = {port} is past 65535")
    return port


def make_kv_manager(args, mode: str, settings: TransferSettings,
                    wait_for_prefill_metadata: bool = False, metrics_rank: int = 0):
    """A ``pdkv.KVManager`` for one rank with these settings.

    The knobs are read by the manager when it starts, so they are put in this process's
    environment first (a value given to the engine wins over one inherited). The metrics
    port (from the settings, else ``PDKV_METRICS_PORT``) is offset by ``metrics_rank``
    (``rank_metrics_port``) and passed in the manager's Config."""
    import pdkv

    knobs = dict(settings.knobs)
    for env, value in knobs.items():
        os.environ[env] = value
    config = None
    base = knobs.get("PDKV_METRICS_PORT", os.environ.get("PDKV_METRICS_PORT", "").strip())
    if base not in ("", None):
        try:
            base = int(base)
        except ValueError:
            raise ValueError(f"PDKV_METRICS_PORT must be an integer, got {base!r}") from None
        if base > 0:
            config = pdkv.Config(metrics_port=rank_metrics_port(base, metrics_rank))
    return pdkv.KVManager(args, mode, settings.bootstrap_addr, backend=settings.backend,
                          layerwise_interval=1 if settings.layerwise and mode == "prefill" else 0,
                          local_ip=settings.local_ip,
                          wait_for_prefill_metadata=wait_for_prefill_metadata, config=config)
