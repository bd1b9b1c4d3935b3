"""docs/CONFIG.md's settings tables and kv.pyi's Config fields are what
scripts/gen_config_docs.py writes from the C++ settings catalog, and the catalog itself
holds together (unique names, defaults inside their ranges, docs text for every row)."""
import importlib.util
import pathlib

import pytest

from pdkv import _native

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs",
                                                  ROOT / "scripts" / "gen_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CATALOG = _native.settings_catalog()


@pytest.mark.parametrize("path", ["docs/CONFIG.md", "python/pdkv/kv.pyi"])
def test_generated_files_are_up_to_date(path):
    gen = _generator()
    wanted = gen.rendered(CATALOG)[ROOT / path]
    assert (ROOT / path).read_text() == wanted, (
        f"{path} differs from the settings catalog; regenerate with: {gen.REGENERATE}")


def test_names_are_unique_and_every_row_has_help():
    names = [s["name"] for s in CATALOG]
    assert len(names) == len(set(names))
    for s in CATALOG:
        assert s["name"].startswith("PDKV_") and s["help"], s["name"]
        assert s["scope"] in ("manager", "process"), s["name"]


@pytest.mark.parametrize("s", CATALOG, ids=lambda s: s["name"])
def test_defaults_lie_in_their_ranges(s):
    if s["type"] in ("int", "float"):
        assert s["low"] <= s["default"] <= s["high"]
    if s["choices"]:
        assert s["default"] in s["choices"]
    if s["type"] == "str" and not s["choices"]:
        assert s["range_text"], f"{s['name']}: free text needs its range text"


def test_config_leaves_out_the_process_wide_settings():
    from pdkv.config import SETTINGS

    fields = {s.env for s in SETTINGS}
    process = {s["name"] for s in CATALOG if s["scope"] == "process"}
    assert {"PDKV_LOG_LEVEL", "PDKV_CUDA_LIBRARY", "PDKV_FAULT_EVERY_N"} <= process
    assert not fields & process
    assert fields == {s["name"] for s in CATALOG} - process
