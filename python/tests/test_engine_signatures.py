"""The engine adapters and the engine stand-ins against the checked-in snapshot of the
upstream signatures (standins/upstream_signatures.json). An adapter method must take the
upstream parameters in the upstream order with the upstream defaults (it may add
optional ones after them); a stand-in must match exactly. Refreshing the snapshot from a
newer upstream commit makes any drift fail here."""
import importlib
import inspect
import json
import os

import pytest

from engine_replay import STANDINS, use_standins

use_standins()
SNAPSHOT = json.load(open(os.path.join(STANDINS, "upstream_signatures.json")))


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _params(fn) -> list[str]:
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            out.append("*" + p.name)
        elif p.kind == p.VAR_KEYWORD:
            out.append("**" + p.name)
        elif p.default is not p.empty:
            out.append(f"{p.name}={p.default!r}")
        else:
            out.append(p.name)
    return out


def _cases(kind: str):
    for engine in ("vllm", "sglang"):
        for cls_name, spec in SNAPSHOT[engine]["classes"].items():
            methods = dict(spec["methods"])
            if kind == "standin":
                methods.update(spec.get("base_only", {}))
            for method, params in methods.items():
                yield pytest.param(spec[kind], method, params, id=f"{engine}-{cls_name}.{method}")


@pytest.mark.parametrize("dotted,method,upstream", list(_cases("standin")))
def test_standin_matches_upstream(dotted, method, upstream):
    assert _params(getattr(_resolve(dotted), method)) == upstream


@pytest.mark.parametrize("dotted,method,upstream", list(_cases("adapter")))
def test_adapter_accepts_the_upstream_call(dotted, method, upstream):
    cls = _resolve(dotted)
    assert method in vars(cls) or method in ("__init__",), f"{dotted} does not define {method}"
    ours = _params(getattr(cls, method))
    named = [p for p in upstream if not p.startswith("*")]
    # Same names in the same order; an upstream default must be kept, and a default the
    # adapter adds only makes it accept more calls.
    mine = [p if "=" in u else p.split("=")[0] for p, u in zip(ours, named)]
    assert mine == named, f"{method}: upstream {upstream}, adapter {ours}"
    for extra in ours[len(named):]:
        assert "=" in extra or extra.startswith("*"), f"{method}: extra required {extra}"
    if "**kwargs" in upstream:
        assert any(p.startswith("**") for p in ours), f"{method} must accept **kwargs"


def test_adapters_subclass_the_engine_bases():
    for engine in ("vllm", "sglang"):
        for spec in SNAPSHOT[engine]["classes"].values():
            assert issubclass(_resolve(spec["adapter"]), _resolve(spec["standin"]))


def test_enums_functions_and_dataclasses_match():
    for engine in ("vllm", "sglang"):
        for dotted, members in SNAPSHOT[engine].get("enums", {}).items():
            enum = _resolve(dotted)
            got = {name: getattr(enum, name) for name in members}
            got = {k: getattr(v, "value", v) for k, v in got.items()}
            assert got == members, dotted
    for dotted, params in SNAPSHOT["sglang"]["functions"].items():
        assert _params(_resolve(dotted)) == params
    import dataclasses
    for dotted, fields in SNAPSHOT["sglang"]["dataclasses"].items():
        assert [f.name for f in dataclasses.fields(_resolve(dotted))] == fields
