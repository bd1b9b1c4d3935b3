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


# Target ids of BENCHMARKS.md and RELIABILITY.md (P1, P1s, P6e, P9f, P1_auth, R1-R4, ...):
# a help text says what is measured in words and may add an id in brackets after them.
TARGET_ID = re.compile(r"\b[PR]\d+[a-z]*(?:_\w+)?\b")
GROUPS = [[], ["bench"]]


def outside_brackets(text: str) -> str:
    """`text` without its (...), [...] and {...} parts, nested ones included."""
    out, depth = [], 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def test_outside_brackets_keeps_only_bare_text():
    text = "latency (P5), scale (P6; a [P6e] {R1}) then P7"
    assert TARGET_ID.findall(outside_brackets(text)) == ["P7"]
    assert TARGET_ID.findall("P1s P6e P9f P1_auth R4 TP1 P2P") == [
        "P1s", "P6e", "P9f", "P1_auth", "R4"]


@pytest.mark.parametrize("path", GROUPS + ALL, ids=lambda p: "_".join(p) or "pdkv")
def test_help_names_no_target_id_outside_brackets(path):
    text = run_help(path)
    bare = [line for line in outside_brackets(text).splitlines() if TARGET_ID.search(line)]
    assert not bare, (f"pdkv {' '.join(path)} --help leads with a target id instead of what "
                      f"is measured (put the id in brackets after the words): {bare}")


def descriptions(help_text: str) -> dict:
    """{sub-command: its one-line description} under CLI11's "Subcommands:" heading."""
    section = help_text.split("Subcommands:", 1)[1]
    return dict(re.findall(r"^  (\S+)\s+(.+)$", section, flags=re.M))


def test_command_lists_say_what_each_command_measures():
    top = descriptions(run_help([]))
    assert "latency" in top["bench"] and "throughput" in top["bench"]
    assert "failure" in top["chaos"]
    bench = descriptions(run_help(["bench"]))
    assert "throughput" in bench["engine"] and "GB/s" in bench["engine"]
    assert "latency" in bench["e2e"] and "throughput" in bench["e2e"]
