"""One version source: CMake's project(VERSION) reaches pdkv.__version__ and `pdkv --version`,
and the wire protocol versions reported beside it are the ones in the protocol headers."""
import os
import pathlib
import re
import subprocess

import pdkv

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _constant(rel: str, name: str) -> int:
    m = re.search(rf"{name} = (\d+);", (ROOT / rel).read_text())
    assert m, f"{name} not found in {rel}"
    return int(m.group(1))


def test_python_version_is_the_cmake_project_version():
    m = re.search(r"project\(pdkv [^)]*VERSION (\d+\.\d+\.\d+)", (ROOT / "CMakeLists.txt").read_text())
    assert m, "project(pdkv ... VERSION x.y.z) not found"
    assert pdkv.__version__ == m.group(1)


def test_protocol_versions_are_the_header_constants():
    assert pdkv.PROTOCOL_VERSION == _constant("proto/wire.h", "kProtocolVersion")
    assert pdkv.LEASE_WIRE_VERSION == _constant("engine/lease/wire.h", "kWireVersion")
    assert pdkv.TCP_WIRE_VERSION == _constant("engine/backends/tcp/tcp_frame.h", "kVersion")


def test_cli_version_prints_both():
    cli = os.path.join(os.environ["PDKV_BIN_DIR"], "pdkv")
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == (f"pdkv {pdkv.__version__} (control protocol {pdkv.PROTOCOL_VERSION}, "
                           f"lease wire {pdkv.LEASE_WIRE_VERSION}, "
                           f"tcp data wire {pdkv.TCP_WIRE_VERSION})")
