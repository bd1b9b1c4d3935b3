#!/usr/bin/env python3
"""Writes the settings tables of docs/CONFIG.md and the Config fields of kv.pyi from the
C++ settings catalog (kv/settings_catalog.h, read through the built pdkv._native).

Each setting is declared once, as a SettingSpec next to the layer that reads it; this
script only renders. It rewrites what lies between the marker comments
(``<!-- BEGIN settings:<section> -->`` ... ``<!-- END settings:<section> -->`` in
docs/CONFIG.md, ``# BEGIN settings fields`` ... ``# END settings fields`` in kv.pyi) and
leaves the prose around them alone.

    PYTHONPATH=build/python /usr/bin/python3 scripts/gen_config_docs.py          # rewrite
    PYTHONPATH=build/python /usr/bin/python3 scripts/gen_config_docs.py --check  # exit 1 on drift

python/tests/test_config_docs.py (a CTest test) fails when the files differ from what
this writes.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import sys
from typing import Any, Callable, Mapping, Sequence

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG_MD = ROOT / "docs" / "CONFIG.md"
KV_PYI = ROOT / "python" / "pdkv" / "kv.pyi"
REGENERATE = "PYTHONPATH=build/python /usr/bin/python3 scripts/gen_config_docs.py"

TABLE_HEAD = "| variable | default | range | meaning |\n|---|---|---|---|\n"
PYI_BEGIN = "    # BEGIN settings fields (scripts/gen_config_docs.py; edit the C++ specs)\n"
PYI_END = "    # END settings fields\n"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _int(v: int) -> str:
    """Large powers of two as 2^n, the way a reader compares sizes."""
    if v >= 1 << 20 and v & (v - 1) == 0:
        return f"2^{v.bit_length() - 1}"
    return str(v)


def _value(spec: Mapping[str, Any]) -> str:
    v = spec["default"]
    if spec["type"] == "bool":
        return "true" if v else "false"
    if spec["type"] == "float":
        return _num(v)
    return str(v)


def default_cell(spec: Mapping[str, Any]) -> str:
    text = spec["default_text"] or f"`{_value(spec)}`"
    return f"{text} {spec['default_note']}" if spec["default_note"] else text


def range_cell(spec: Mapping[str, Any]) -> str:
    if spec["range_text"]:
        return spec["range_text"]
    if spec["choices"]:
        return ", ".join(spec["choices"])
    if spec["type"] == "bool":
        return "boolean"
    if spec["type"] == "int":
        return f"{_int(spec['low'])} – {_int(spec['high'])}"
    if spec["type"] == "float":
        return f"{_num(spec['low'])} – {_num(spec['high'])}"
    raise ValueError(f"{spec['name']}: a free-text setting needs its range text in its spec")


def table(specs: Sequence[Mapping[str, Any]]) -> str:
    rows = [f"| `{s['name']}` | {default_cell(s)} | {range_cell(s)} | {s['help']} |\n"
            for s in specs]
    return TABLE_HEAD + "".join(rows)


def pyi_fields(specs: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for s in specs:
        if s["scope"] != "manager":
            continue
        field = s["name"][len("PDKV_"):].lower()
        line = f"    {field}: Optional[{s['type']}]  # {s['name']}, default {s['default']!r}"
        if s["choices"]:
            line += f" ({', '.join(s['choices'])})"
        lines.append(line + "\n")
    return "".join(lines)


def _replace_between(text: str, begin: str, end: str, body: str, where: str) -> str:
    start = text.find(begin)
    stop = text.find(end, start + len(begin)) if start >= 0 else -1
    if start < 0 or stop < 0:
        raise ValueError(f"{where}: markers {begin.strip()!r} ... {end.strip()!r} not found")
    return text[: start + len(begin)] + body + text[stop:]


def render_config_md(text: str, catalog: Sequence[Mapping[str, Any]]) -> str:
    sections: dict[str, list] = {}
    for spec in catalog:
        sections.setdefault(spec["section"], []).append(spec)
    for key, specs in sections.items():
        text = _replace_between(text, f"<!-- BEGIN settings:{key} -->\n",
                                f"<!-- END settings:{key} -->", table(specs), "docs/CONFIG.md")
    unknown = set(re.findall(r"<!-- BEGIN settings:([\w-]+) -->", text)) - set(sections)
    if unknown:
        raise ValueError(f"docs/CONFIG.md: marker for unknown section(s) {sorted(unknown)}")
    return text


def render_kv_pyi(text: str, catalog: Sequence[Mapping[str, Any]]) -> str:
    return _replace_between(text, PYI_BEGIN, PYI_END, pyi_fields(catalog), "kv.pyi")


def rendered(catalog: Sequence[Mapping[str, Any]]) -> dict[pathlib.Path, str]:
    """Each generated file's wanted text."""
    outputs: dict[pathlib.Path, Callable[[str, Sequence], str]] = {
        CONFIG_MD: render_config_md, KV_PYI: render_kv_pyi}
    return {path: render(path.read_text(), catalog) for path, render in outputs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a file differs from what would be written")
    args = parser.parse_args()
    from pdkv import _native

    stale = []
    for path, text in rendered(_native.settings_catalog()).items():
        if path.read_text() == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        print(f"out of date: {', '.join(map(str, stale))}; regenerate with: {REGENERATE}")
        return 1
    for path in stale:
        print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
