"""The ``pdkv`` console script of the wheel: hands over to the CLI binary the wheel carries
in ``pdkv/_bin/pdkv``. The binary finds this package relative to itself
(cli/python_tool.h), so its Python-driven sub-commands (demo, bench e2e, chaos) run
from the installed package alone."""
from __future__ import annotations

import os
import pathlib
import sys


def binary_path() -> pathlib.Path:
    """Where the bundled CLI binary is (it exists only in the wheel, not in a build tree)."""
    return pathlib.Path(__file__).resolve().with_name("_bin") / "pdkv"


def main() -> None:
    """Replaces this process with the CLI binary, passing every argument on."""
    exe = binary_path()
    if not exe.is_file():
        raise SystemExit(f"pdkv: {exe} is missing: this pdkv package was not installed from "
                         "the wheel (in a build tree, run build/bin/pdkv)")
    os.execv(exe, [str(exe), *sys.argv[1:]])


if __name__ == "__main__":
    main()
