"""A cluster secret across real processes (docs/SECURITY.md): members move every byte;
a rank without the secret, or with another one, takes part in nothing."""
import os

import pytest

import pdkv
from kv_harness import Cluster, Shape
from pdkv.testing.secret_file import write_secret
from test_kv_e2e import FAILED, assert_all_succeeded


@pytest.fixture
def secret(tmp_path, monkeypatch):
    """The cluster secret, also set in this process (its bootstrap server reads it)."""
    p = write_secret(tmp_path / "secret", b"s" * 32)
    monkeypatch.setenv("PDKV_SECRET_FILE", p)
    return p


# Every backend runs the session handshake with the secret: tcp on its data connections,
# shm (and ucx) on the lease channel before any CMA write or UCX put.
BACKENDS = ["tcp", "shm"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_members_with_the_secret_move_every_byte(secret, backend):
    env = {"PDKV_SECRET_FILE": secret, "PDKV_ENGINE_BACKEND": backend}
    with Cluster(pdkv, Shape(), p_tp=2, d_tp=1, rooms=(31, 32), pages=6, env=env) as c:
        assert_all_succeeded(c.start().run())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("decode_secret", ["none", "other"])
def test_a_decode_without_the_secret_gets_no_byte_and_fails_with_a_reason(
        secret, tmp_path, decode_secret, backend):
    decode_env = {"PDKV_SECRET_FILE": ""}
    if decode_secret == "other":
        decode_env["PDKV_SECRET_FILE"] = write_secret(tmp_path / "other", b"o" * 32)
    env = {"PDKV_SECRET_FILE": secret, "PDKV_BOOTSTRAP_TIMEOUT_S": "2",
           "PDKV_ENGINE_BACKEND": backend}
    with Cluster(pdkv, Shape(), rooms=(41,), pages=4, env=env, decode_env=decode_env,
                 timeout=20) as c:
        done = c.start().run(timeout=40)
        decode = done[("decode", 0)]
        assert decode["states"][41] == FAILED
        assert decode["bytes_ok"][41] is False
        # The prefill refuses its control handshake: the room fails at once with that
        # reason and cause, not at a timeout.
        reason = decode["reasons"][41].lower()
        assert "secrets differ" in reason, reason
        assert decode["causes"][41][0] is pdkv.FailureCause.Unauthenticated
        prefill = done[("prefill", 0)]
        assert prefill["states"][41] == FAILED
        assert prefill["metrics"]["bytes_written"] == 0


def test_a_prefill_without_the_secret_cannot_register(secret, monkeypatch):
    server = pdkv.BootstrapServer("127.0.0.1", 0)
    try:
        monkeypatch.setenv("PDKV_SECRET_FILE", "")
        from kv_harness import RankMemory
        mem = RankMemory(Shape(), 1, 0)
        with pytest.raises(Exception, match="(?i)unauthenticated|secret"):
            mgr = pdkv.KVManager(mem.kv_args(pdkv, 0, 1, 1, False, False), "prefill",
                                 f"127.0.0.1:{server.port}")
            mgr.shutdown()
    finally:
        server.stop()


def test_a_world_readable_secret_file_is_refused(tmp_path, monkeypatch):
    p = tmp_path / "open"
    p.write_bytes(b"x" * 32)
    os.chmod(p, 0o644)
    monkeypatch.setenv("PDKV_SECRET_FILE", str(p))
    with pytest.raises(Exception, match="chmod 600"):
        pdkv.BootstrapServer("127.0.0.1", 0)
