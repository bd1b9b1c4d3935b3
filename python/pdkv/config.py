"""pdkv.Config: every PDKV_* setting of a KV manager as a typed field, set in code.

Engines configure a connector from their own config objects (vLLM's
``kv_connector_extra_config``, sglang's ``server_args``), and an environment variable set
for one rank leaks into every other component of the process. A ``Config`` passed to
``KVManager(..., config=...)`` reaches that manager only.

Precedence, per setting (decided once, in C++ common/config.h):
  1. the field set in this Config,
  2. else the ``PDKV_*`` environment variable,
  3. else the default (docs/CONFIG.md).
A field left at ``None`` is "not set here". Each field is named after its variable
(``PDKV_BOOTSTRAP_TIMEOUT_S`` -> ``bootstrap_timeout_s``) and checked on construction:
a wrong type or a value outside its range raises ValueError naming the field.

Adding a setting is one line in ``SETTINGS`` (plus its line in kv.pyi and
docs/CONFIG.md); python/tests/test_config.py checks every line against the C++ reader
(default, range, choices) and that every knob a manager reads has a field.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

__all__ = ["Config", "Setting", "SETTINGS"]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One PDKV_* setting: its variable, type, default and allowed values."""

    env: str  # the environment variable, PDKV_...
    type: type  # int, float, bool or str
    default: Any
    low: Optional[float] = None  # inclusive range of numbers
    high: Optional[float] = None
    choices: Optional[Sequence[str]] = None  # allowed strings

    @property
    def field(self) -> str:
        """The Config field: the variable without PDKV_, lower case."""
        return self.env[len("PDKV_"):].lower()

    def check(self, value: Any) -> Any:
        """The value as this setting's type; ValueError naming the field otherwise."""
        where = f"Config.{self.field} ({self.env})"
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            raise ValueError(f"{where} must be {self.type.__name__}, "
                             f"got {type(value).__name__} {value!r}")
        if self.type is float and value != value:
            raise ValueError(f"{where} must be a number, got NaN")
        if self.low is not None and not self.low <= value <= self.high:
            raise ValueError(f"{where}={value!r} is out of range [{_num(self.low)}, "
                             f"{_num(self.high)}]")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{where}={value!r} is not one of {', '.join(self.choices)}")
        return value

    def text(self, value: Any) -> str:
        """The value as the C++ reader parses it (the environment's spelling)."""
        if self.type is bool:
            return "true" if value else "false"
        return repr(value) if self.type is float else str(value)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _i(env: str, default: int, low: int, high: int) -> Setting:
    return Setting(env, int, default, low, high)


def _f(env: str, default: float, low: float, high: float) -> Setting:
    return Setting(env, float, default, low, high)


def _s(env: str, default: str, choices: Optional[Sequence[str]] = None) -> Setting:
    return Setting(env, str, default, choices=tuple(choices) if choices else None)


_TiB = 1 << 40

# One line per setting; docs/CONFIG.md says what each one does. PDKV_LOG_LEVEL is not
# here: it sets the process-wide logger, not one manager (use pdkv.logging_bridge or the
# variable). PDKV_FAULT_* are read only by the chaos shim.
SETTINGS: tuple[Setting, ...] = (
    # engine
    _s("PDKV_ENGINE_BACKEND", "tcp", ("tcp", "shm", "ucx")),
    _s("PDKV_ENGINE_HOST", "127.0.0.1"),
    _i("PDKV_ENGINE_PORT", 0, 0, 65535),
    _i("PDKV_ENGINE_CONNECT_TIMEOUT_MS", 3000, 1, 600000),
    _i("PDKV_TCP_STREAMS", 4, 1, 64),
    _i("PDKV_TCP_IO_TIMEOUT_MS", 5000, 10, 3600000),
    _i("PDKV_TCP_SOCKET_BUFFER_BYTES", 0, 0, 1 << 30),
    _i("PDKV_TCP_MIN_SPLIT_BYTES", 1 << 20, 4096, _TiB),
    _i("PDKV_TCP_MAX_PART_ENTRIES", 1 << 20, 1, 1 << 24),
    _i("PDKV_TCP_STAGE_MAX_BYTES", 0, 0, 1 << 20),
    _i("PDKV_TCP_INLINE_WRITE_BYTES", 256 << 10, 0, 16 << 20),
    _i("PDKV_TCP_MAX_CONNECTIONS", 512, 1, 65536),
    _i("PDKV_TCP_DEVICE_SLABS", 3, 1, 64),
    _i("PDKV_TCP_DEVICE_SLAB_BYTES", 2 << 20, 64 << 10, 1 << 30),
    _i("PDKV_SHM_COPY_THREADS", 2, 1, 16),
    _i("PDKV_SHM_PART_BYTES", 64 << 20, 1 << 20, 1 << 30),
    _i("PDKV_SHM_IO_TIMEOUT_MS", 5000, 100, 600000),
    _s("PDKV_UCX_TLS", ""),
    _s("PDKV_UCX_ERR_MODE", "auto", ("auto", "peer", "none")),
    _i("PDKV_UCX_IO_TIMEOUT_MS", 5000, 100, 600000),
    _i("PDKV_UCX_PART_BYTES", 64 << 20, 1 << 20, 1 << 30),
    _i("PDKV_UCX_MAX_WORKERS", 256, 2, 65536),
    # control plane
    _i("PDKV_ZMQ_SNDHWM", 10000, 1, 1000000),
    _i("PDKV_ZMQ_MAX_PEERS", 8192, 16, 1 << 16),
    # KV managers
    _f("PDKV_BOOTSTRAP_TIMEOUT_S", 120.0, 0.1, 86400.0),
    _f("PDKV_WAITING_TIMEOUT_S", 300.0, 0.1, 86400.0),
    _f("PDKV_METADATA_TIMEOUT_S", 10.0, 0.01, 3600.0),
    _f("PDKV_HEARTBEAT_INTERVAL_S", 0.5, 0.05, 60.0),
    _i("PDKV_HEARTBEAT_MAX_FAILURES", 3, 1, 100),
    _f("PDKV_BOOTSTRAP_REFRESH_S", 2.0, 0.0, 3600.0),
    _f("PDKV_FAILED_PEER_TTL_S", 30.0, 0.0, 3600.0),
    _f("PDKV_FAILED_PEER_COOLDOWN_S", 1.0, 0.001, 3600.0),
    _i("PDKV_TRANSFER_ATTEMPTS", 3, 1, 10),
    _i("PDKV_TRANSFER_WINDOW_BYTES", 64 << 20, 1 << 16, _TiB),
    _i("PDKV_TRANSFER_BATCH_BYTES", 4 << 20, 4 << 10, 1 << 32),
    Setting("PDKV_VERIFY_CHECKSUM", bool, False),
    Setting("PDKV_STATUS_IN_BAND", bool, True),
    _i("PDKV_MAX_DECODE_PEERS", 4096, 1, 1 << 20),
    _i("PDKV_MAX_PENDING_ROOMS", 65536, 1, 1 << 24),
    _i("PDKV_MAX_PENDING_ROOMS_PER_DECODE", 8192, 1, 1 << 24),
    _i("PDKV_MAX_PENDING_BYTES_PER_DECODE", 1 << 28, 1 << 16, 1 << 40),
    _s("PDKV_LOCAL_IP", ""),
    _i("PDKV_METRICS_PORT", -1, -1, 65535),
    _s("PDKV_METRICS_HOST", "127.0.0.1"),
    # route registry (docs/CONFIG.md "route registry")
    _s("PDKV_REGISTRY", "http", ("http", "etcd")),
    _s("PDKV_ETCD_ENDPOINTS", "127.0.0.1:2379"),
    _s("PDKV_ETCD_PREFIX", "/pdkv"),
    _i("PDKV_ETCD_LEASE_TTL_S", 10, 2, 3600),
    # cluster membership (docs/SECURITY.md): a path, never the secret itself
    _s("PDKV_SECRET_FILE", ""),
)

_BY_FIELD = {s.field: s for s in SETTINGS}


def _config_from_fields(fields: dict) -> "Config":
    return Config(**fields)


class Config:
    """Explicit PDKV_* settings for one KVManager; unset fields (None) come from the
    environment, else the default. ``Config(bootstrap_timeout_s=5.0, tcp_streams=2)``.

    Unknown fields, wrong types and out-of-range values raise ValueError naming the
    field. Immutable: ``replace(**fields)`` returns a new Config."""

    __slots__ = ("_values",)

    def __init__(self, **fields: Any):
        unknown = sorted(set(fields) - set(_BY_FIELD))
        if unknown:
            raise ValueError(f"Config got unknown field(s): {', '.join(unknown)}; "
                             f"known fields: {', '.join(_BY_FIELD)}")
        values = {name: _BY_FIELD[name].check(v) for name, v in fields.items() if v is not None}
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name: str) -> Any:
        if name in _BY_FIELD:
            return self._values.get(name)
        raise AttributeError(f"Config has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is immutable; use replace()")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def __reduce__(self):
        # Picklable (engines hand configs to spawned rank processes), re-checked on load.
        return (_config_from_fields, (dict(self._values),))

    def replace(self, **fields: Any) -> "Config":
        """A copy with `fields` changed (None unsets a field)."""
        merged = dict(self._values)
        merged.update(fields)
        return Config(**merged)

    def explicit(self) -> dict[str, Any]:
        """The fields set in this Config, by field name."""
        return dict(self._values)

    def to_settings(self) -> dict[str, str]:
        """The fields set here as the C++ reader takes them: variable name -> text."""
        return {_BY_FIELD[k].env: _BY_FIELD[k].text(v) for k, v in self._values.items()}

    def resolved(self, use_environment: bool = True) -> dict[str, tuple[str, str]]:
        """What a manager built with this Config would use, by variable name: (value as
        text, origin) with origin "explicit", "environment" or "default". Read by the C++
        readers themselves (the same code a manager runs); ValueError if the environment
        holds a bad value."""
        from pdkv import _native

        return {name: (value, origin) for name, value, origin in
                _native.resolve_settings(self.to_settings(), bool(use_environment))}

    @staticmethod
    def defaults() -> dict[str, Any]:
        """Every field's default, by field name."""
        return {s.field: s.default for s in SETTINGS}

    @staticmethod
    def from_mapping(values: Mapping[str, Any]) -> "Config":
        """From an engine's config dict (e.g. ``kv_connector_extra_config``): keys are field
        names or PDKV_* variable names; other keys raise ValueError."""
        by_env = {s.env: s.field for s in SETTINGS}
        return Config(**{by_env.get(k, k): v for k, v in values.items()})
