"""pdkv.BootstrapServer reads its cluster secret by a manager's rule: the Config's
secret_file first, then PDKV_SECRET_FILE. A real server on loopback, real HTTP requests."""
import os
import urllib.error
import urllib.request

import pytest

import pdkv


def status_of(method, port, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture
def secret(tmp_path, monkeypatch):
    monkeypatch.delenv("PDKV_SECRET_FILE", raising=False)
    path = tmp_path / "secret"
    path.write_bytes(os.urandom(32))
    os.chmod(path, 0o600)
    return str(path)


def test_a_config_secret_makes_unsigned_writes_401(secret):
    with pdkv.BootstrapServer("127.0.0.1", 0, config=pdkv.Config(secret_file=secret)) as s:
        assert status_of("PUT", s.port, "/route", b"{}") == 401
        # Reads stay open unless asked otherwise.
        assert status_of("GET", s.port, "/health") == 200
    with pdkv.BootstrapServer("127.0.0.1", 0) as s:  # no secret anywhere: the body is read
        assert status_of("PUT", s.port, "/route", b"{}") == 400


def test_the_environment_applies_when_the_config_names_no_secret(secret, monkeypatch):
    monkeypatch.setenv("PDKV_SECRET_FILE", secret)
    with pdkv.BootstrapServer("127.0.0.1", 0, config=pdkv.Config()) as s:
        assert status_of("PUT", s.port, "/route", b"{}") == 401


def test_authenticated_reads_need_a_signature_and_a_secret(secret):
    cfg = pdkv.Config(secret_file=secret)
    with pdkv.BootstrapServer("127.0.0.1", 0, config=cfg, authenticate_reads=True) as s:
        assert status_of("GET", s.port, "/route?engine_rank=-1&target_dp_group=-1") == 401
    with pytest.raises(ValueError, match="cluster secret"):
        pdkv.BootstrapServer("127.0.0.1", 0, authenticate_reads=True)


def test_a_bad_secret_file_fails_start_up_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("PDKV_SECRET_FILE", raising=False)
    short = tmp_path / "short"
    short.write_bytes(b"x" * 8)
    os.chmod(short, 0o600)
    with pytest.raises(ValueError, match="PDKV_SECRET_FILE"):
        pdkv.BootstrapServer("127.0.0.1", 0, config=pdkv.Config(secret_file=str(short)))
    with pytest.raises(ValueError, match="pdkv.Config"):
        pdkv.BootstrapServer("127.0.0.1", 0, config={"secret_file": str(short)})
