"""PDKV_SECRET_FILE across real processes: a FIFO fails start-up at once instead of
hanging it; a secret of raw bytes is taken as the file holds it (a final 0x0a included,
which `head -c 32 /dev/urandom` writes one time in 256), and the ranks using it move every
byte; a file too long is reported with its size.

Each process starts with the file named in its environment, as a deployment sets it.
"""
import os
import subprocess
import sys

import pdkv
from kv_harness import Cluster, Shape
from test_kv_e2e import assert_all_succeeded

# Starts the bootstrap server and a decode rank with PDKV_SECRET_FILE as the environment
# has it; prints what each said.
START = """
import sys
sys.path.insert(0, {tests!r})
import pdkv
from kv_harness import RankMemory, Shape
for what, start in (("bootstrap", lambda: pdkv.BootstrapServer("127.0.0.1", 0)),
                    ("decode", lambda: pdkv.KVManager(
                        RankMemory(Shape(), 1, 0).kv_args(pdkv, 0, 1, 1), "decode",
                        "127.0.0.1:9"))):
    try:
        start()
        print(what, "started")
    except Exception as e:
        print(what, "refused:", e)
"""


def start_with_secret(path: str, timeout: float = 20) -> str:
    env = dict(os.environ, PDKV_SECRET_FILE=path, PDKV_BOOTSTRAP_TIMEOUT_S="1")
    code = START.format(tests=os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=timeout)
    return out.stdout


def test_a_fifo_fails_start_up_at_once(tmp_path):
    fifo = tmp_path / "secret"
    os.mkfifo(fifo, 0o600)
    # Before, opening it waited for a writer: the process never started nor failed.
    said = start_with_secret(str(fifo))
    assert "bootstrap refused:" in said and "decode refused:" in said, said
    assert "is a FIFO" in said, said


def test_a_file_too_long_is_reported_with_its_size(tmp_path):
    p = tmp_path / "secret"
    p.write_bytes(b"x" * 5000)
    os.chmod(p, 0o600)
    said = start_with_secret(str(p))
    assert said.count("5000 bytes") == 2, said


def test_raw_bytes_ending_in_a_newline_are_the_secret(tmp_path, monkeypatch):
    # As `head -c 32 /dev/urandom` writes it one time in 256: random bytes, the last 0x0a.
    p = tmp_path / "secret"
    p.write_bytes(bytes(range(0x80, 0x80 + 31)) + b"\n")
    os.chmod(p, 0o600)
    monkeypatch.setenv("PDKV_SECRET_FILE", str(p))  # this process's bootstrap server
    env = {"PDKV_SECRET_FILE": str(p)}
    with Cluster(pdkv, Shape(), rooms=(41, 42), pages=4, env=env) as c:
        assert_all_succeeded(c.start().run(timeout=60))
