#!/usr/bin/env python3
"""Fails when the code reads a PDKV_* variable that docs/CONFIG.md does not document.

Scans C++, Python and shell sources outside tests for string literals naming PDKV_*
variables; every name must appear in docs/CONFIG.md. Test-only knobs (in *_test.cc
files and tests/ directories) are exempt, as are CMake/build variables.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = re.compile(r'"(PDKV_[A-Z0-9_]+)"')
# Names that are build/CMake or test-harness plumbing, not user configuration.
NOT_KNOBS = {"PDKV_BIN_DIR", "PDKV_PYTHON_DIR"}
SOURCE_DIRS = ["common", "plan", "engine", "proto", "http", "bootstrap", "kv", "python", "cli", "bench"]


def is_test_file(path: pathlib.Path) -> bool:
    return path.name.endswith(("_test.cc", "_fuzzer.cc")) or "tests" in path.parts or path.name.startswith("test_")


def main() -> int:
    documented = set(re.findall(r"`(PDKV_[A-Z0-9_]+)`", (ROOT / "docs" / "CONFIG.md").read_text()))
    missing = {}
    for top in SOURCE_DIRS:
        base = ROOT / top
        if not base.exists():
            continue
        for path in base.rglob("*"):
            if path.suffix not in {".cc", ".h", ".py"} or is_test_file(path):
                continue
            for name in NAME.findall(path.read_text(errors="replace")):
                if name not in documented and name not in NOT_KNOBS:
                    missing.setdefault(name, path.relative_to(ROOT))
    for name, where in sorted(missing.items()):
        print(f"{name} (read in {where}) has no line in docs/CONFIG.md")
    if not missing:
        print(f"all PDKV_* knobs documented ({len(documented)} in docs/CONFIG.md)")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
