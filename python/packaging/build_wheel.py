#!/usr/bin/env python3
"""Builds the pdkv wheel from a CMake build tree, offline.

    python3 python/packaging/build_wheel.py --build-dir build --out-dir build/dist

Stages build/python/pdkv (the package, its native modules, the CLI's driver scripts in
pdkv/_tools) plus build/bin/pdkv, pdkv_engine_peer (which `pdkv bench engine` starts) and
pdkv_hostile_peer (which `pdkv chaos --hostile` starts) in pdkv/_bin, with debug info stripped, then runs
Debian's `python3 -m build --no-isolation --wheel` on it: nothing is downloaded. The
version is the package's pdkv/_version.py (CMake's project version). Prints the wheel's path.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent


def stage(build_dir: pathlib.Path, stage_dir: pathlib.Path) -> str:
    """Fills stage_dir with the project files and the package; returns the version."""
    package = build_dir / "python" / "pdkv"
    cli = build_dir / "bin" / "pdkv"
    for need in (package / "__init__.py", package / "_version.py", cli):
        if not need.exists():
            raise SystemExit(f"build_wheel: {need} is missing: build pdkv first (scripts/build.sh)")
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    shutil.copytree(package, stage_dir / "pdkv",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_bin"))
    (stage_dir / "pdkv" / "_bin").mkdir()
    shutil.copy2(cli, stage_dir / "pdkv" / "_bin" / "pdkv")
    # `pdkv bench engine` (and so `pdkv demo`) starts its receiving peer from the CLI's
    # own directory, `pdkv chaos --hostile` its attacker.
    for helper in ("pdkv_engine_peer", "pdkv_hostile_peer"):
        peer = build_dir / "bin" / helper
        if peer.exists():
            shutil.copy2(peer, stage_dir / "pdkv" / "_bin" / helper)
    # Debug info is most of the bytes (RelWithDebInfo) and zipping it is most of the time.
    strip = shutil.which("strip")
    if strip:
        natives = [*(stage_dir / "pdkv" / "_bin").iterdir(), *(stage_dir / "pdkv").rglob("*.so")]
        subprocess.run([strip, "--strip-debug", *map(str, natives)], check=True)
    version = re.search(r'__version__ = "([^"]+)"',
                        (package / "_version.py").read_text()).group(1)
    template = (HERE / "pyproject.toml.in").read_text()
    (stage_dir / "pyproject.toml").write_text(
        template.replace("@PROJECT_VERSION@", version)
        .replace("@PYTHON_MINOR@", str(sys.version_info.minor)))
    shutil.copy2(HERE / "setup.py", stage_dir / "setup.py")
    shutil.copy2(HERE / "pdkv-sglang.pth", stage_dir / "pdkv-sglang.pth")
    shutil.copy2(HERE.parent.parent / "README.md", stage_dir / "README.md")
    return version


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", type=pathlib.Path, default=pathlib.Path("build"),
                    help="the CMake build tree (default: build)")
    ap.add_argument("--out-dir", type=pathlib.Path, default=None,
                    help="where the wheel is written (default: <build dir>/dist)")
    ap.add_argument("--stage-dir", type=pathlib.Path, default=None,
                    help="scratch directory (default: <build dir>/packaging/wheel-stage)")
    a = ap.parse_args()
    build_dir = a.build_dir.resolve()
    out_dir = (a.out_dir or build_dir / "dist").resolve()
    stage_dir = (a.stage_dir or build_dir / "packaging" / "wheel-stage").resolve()
    version = stage(build_dir, stage_dir)
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel",
                    "--outdir", str(out_dir), str(stage_dir)],
                   check=True, stdout=subprocess.DEVNULL)
    wheels = sorted(out_dir.glob(f"pdkv-{version}-*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise SystemExit(f"build_wheel: no pdkv-{version}-*.whl in {out_dir}")
    print(wheels[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
