#!/usr/bin/env python3
"""Fails when a C++ include climbs a layer or closes a cycle.

Layers, lowest first (docs/ARCHITECTURE.md, folder map). A file may include files of its
own top-level folder and of folders on a strictly lower layer; folders that share a layer
are peers and include none of each other:

  0  common
  1  plan, proto, http
  2  engine
  3  bootstrap
  4  kv
  5  python, bench, robustness, demo, examples, tests
  6  cli                 (the `pdkv` command: every sub-command, nothing below includes it)

Cycles: a header and its .cc count as one unit (engine/batch_table.h + .cc), and so does
a private `x_internal.h` with x (proto/codec_internal.h belongs to proto/codec); no chain
of includes between units may lead back to where it started, inside a folder or across.
KNOWN_CYCLES lists the ones that were there when this check came; each is to be broken,
none may be added.

A source file in a top-level folder missing from the table fails too, so a new folder
is placed on a layer when it is created.
"""
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = [
    ["common"],
    ["plan", "proto", "http"],
    ["engine"],
    ["bootstrap"],
    ["kv"],
    ["python", "bench", "robustness", "demo", "examples", "tests"],
    ["cli"],
]
# Each a pair whose files call both ways: engine_bench_util.h takes engine_bench.h's
# arguments while engine_bench.cc uses the utilities; registry_options.cc builds the etcd
# directory, whose header takes the options.
KNOWN_CYCLES = {
    ("bench/engine/engine_bench", "bench/engine/engine_bench_util"),
    ("kv/registry/etcd_route_directory", "kv/registry/registry_options"),
}
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}
SUFFIXES = {".h", ".cc", ".c", ".cpp", ".hpp"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def sources():
    for folder, dirs, names in os.walk(ROOT):
        here = pathlib.Path(folder).relative_to(ROOT)
        if here == pathlib.Path("."):
            # Build trees (build/, build-asan/, ...) and hidden folders (.git, .ci) hold
            # no sources of a layer.
            dirs[:] = [d for d in dirs if not d.startswith(("build", "."))]
        dirs.sort()
        for name in sorted(names):
            if here != pathlib.Path(".") and pathlib.PurePath(name).suffix in SUFFIXES:
                yield here / name


def unit(rel: pathlib.PurePath) -> str:
    name = str(rel.with_suffix(""))
    return name[: -len("_internal")] if name.endswith("_internal") else name


def strongly_connected(graph):
    """Tarjan's algorithm, iterative; returns the components with more than one unit."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main() -> int:
    problems = []
    graph = {}
    files = list(sources())
    for rel in files:
        top = rel.parts[0]
        if top not in RANK:
            problems.append(f"{rel}: folder '{top}/' is on no layer (add it to LAYERS here "
                            "and to the folder map in docs/ARCHITECTURE.md)")
            continue
        graph.setdefault(unit(rel), set())
        text = (ROOT / rel).read_text(errors="replace")
        for target in INCLUDE.findall(text):
            target_top = target.split("/", 1)[0]
            if target_top not in RANK:
                continue  # a system or generated header ("pdkv/version.h"), or a sibling
            if target_top != top and RANK[target_top] >= RANK[top]:
                problems.append(f'{rel}: includes "{target}": {top}/ (layer {RANK[top]}) may '
                                f"include only lower layers, and {target_top}/ is on layer "
                                f"{RANK[target_top]}")
            target_unit = unit(pathlib.PurePath(target))
            if target_unit != unit(rel):
                graph[unit(rel)].add(target_unit)
    cycles = {tuple(component) for component in strongly_connected(graph)}
    for component in sorted(cycles - KNOWN_CYCLES):
        problems.append("include cycle between " + ", ".join(component))
    for line in problems:
        print(line)
    if problems:
        return 1
    print(f"{len(files)} C++ files: no include climbs a layer, no include cycle beyond the "
          f"{len(cycles & KNOWN_CYCLES)} known")
    return 0


if __name__ == "__main__":
    sys.exit(main())
