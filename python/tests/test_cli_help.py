"""`pdkv <sub-command> --help` prints the real options of every sub-command, the
Python-driven ones included (their scripts answer --help), each with a description."""
import os
import re
import subprocess

import pytest

CLI = os.path.join(os.environ.get("PDKV_BIN_DIR", "build/bin"), "pdkv")


def run_help(path: list[str]) -> str:
    r = subprocess.run([CLI, *path, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"pdkv {' '.join(path)} --help exited {r.returncode}: {r.stderr}"
    return r.stdout


def subcommands(help_text: str) -> list[str]:
    """Names listed under CLI11's "Subcommands:" heading."""
    if "Subcommands:" not in help_text:
        return []
    section = help_text.split("Subcommands:", 1)[1]
    return re.findall(r"^  (\S+)\s", section, flags=re.M)


def leaves(path: list[str]) -> list[list[str]]:
    subs = subcommands(run_help(path))
    if not subs:
        return [path]
    return [leaf for s in subs for leaf in leaves([*path, s])]


ALL = leaves([])


def test_every_known_sub_command_is_reachable():
    names = {" ".join(p) for p in ALL}
    assert {"demo", "chaos", "bench e2e", "bench engine", "bootstrap"} <= names


@pytest.mark.parametrize("path", ALL, ids=lambda p: "_".join(p))
def test_help_lists_described_options(path):
    lines = run_help(path).splitlines()
    rows = [i for i, line in enumerate(lines) if re.match(r"^  -", line)]
    options = [lines[i] for i in rows if not re.match(r"^  -h,? ?--help", lines[i])]
    assert options, f"pdkv {' '.join(path)} --help shows no options"
    for i in rows:
        described = re.match(r"^  -\S.*?\s{2,}\S", lines[i]) or (
            i + 1 < len(lines) and re.match(r"^ {8,}\S", lines[i + 1]))
        assert described, f"pdkv {' '.join(path)}: option without description: {lines[i]!r}"
