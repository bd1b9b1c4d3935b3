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

The settings are not written here: ``SETTINGS`` is made from the C++ catalog
(``pdkv._native.settings_catalog()``, kv/settings_catalog.h), where each setting is
declared once with its type, default, range and help text and read by the C++ options
readers through the same declaration. Adding a setting is adding its spec there;
``scripts/gen_config_docs.py`` then rewrites its rows in docs/CONFIG.md and its field in
kv.pyi, and python/tests/test_config.py checks every field against the C++ readers.
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


_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def _from_spec(spec: Mapping[str, Any]) -> Setting:
    kind = _TYPES[spec["type"]]
    choices = tuple(spec["choices"]) or None
    return Setting(spec["name"], kind, spec["default"], spec["low"], spec["high"], choices)


def _catalog_settings() -> tuple[Setting, ...]:
    from pdkv import _native

    # Scope "process" settings are read from the environment only: PDKV_LOG_LEVEL sets the
    # process-wide logger, not one manager (use pdkv.log or the variable), PDKV_CUDA_* the
    # driver the process opens, PDKV_FAULT_* only the chaos shim.
    return tuple(_from_spec(s) for s in _native.settings_catalog() if s["scope"] == "manager")


# One Setting per pdkv.Config field, in the catalog's order (docs/CONFIG.md's).
SETTINGS: tuple[Setting, ...] = _catalog_settings()

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
