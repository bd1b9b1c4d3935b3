"""pdkv.Config: typed, range-checked fields; the table agrees with the C++ readers; the
precedence explicit config > environment > default holds in a real KVManager."""
import os
import pathlib
import re
import time

import numpy as np
import pytest

import pdkv
from orphan_room import decode_args, room_without_prefill
from pdkv.config import SETTINGS, Setting

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md"


@pytest.fixture
def clean_env(monkeypatch):
    """No PDKV_* setting from the outer environment (ctest sets some)."""
    for name in list(os.environ):
        if name.startswith("PDKV_") and name not in ("PDKV_BIN_DIR", "PDKV_PYTHON_DIR"):
            monkeypatch.delenv(name)
    return monkeypatch


# --- construction --------------------------------------------------------------------


def test_fields_are_typed_and_default_to_unset():
    c = pdkv.Config(bootstrap_timeout_s=5, tcp_streams=2, verify_checksum=True)
    assert c.bootstrap_timeout_s == 5.0 and isinstance(c.bootstrap_timeout_s, float)
    assert c.tcp_streams == 2 and c.verify_checksum is True
    assert c.waiting_timeout_s is None
    assert c.to_settings() == {"PDKV_BOOTSTRAP_TIMEOUT_S": "5.0", "PDKV_TCP_STREAMS": "2",
                               "PDKV_VERIFY_CHECKSUM": "true"}
    assert pdkv.Config.defaults()["bootstrap_timeout_s"] == 120.0


@pytest.mark.parametrize("fields, names", [
    ({"tcp_streams": 0}, "Config.tcp_streams (PDKV_TCP_STREAMS)=0 is out of range [1, 64]"),
    ({"bootstrap_timeout_s": 0.01}, "Config.bootstrap_timeout_s"),
    ({"tcp_streams": "4"}, "Config.tcp_streams (PDKV_TCP_STREAMS) must be int"),
    ({"tcp_streams": True}, "must be int"),
    ({"verify_checksum": 1}, "Config.verify_checksum (PDKV_VERIFY_CHECKSUM) must be bool"),
    ({"engine_backend": "rdma"}, "Config.engine_backend (PDKV_ENGINE_BACKEND)='rdma' is not one"),
    ({"heartbeat_interval_s": float("nan")}, "Config.heartbeat_interval_s"),
    ({"no_such_field": 1}, "unknown field(s): no_such_field"),
])
def test_bad_fields_raise_value_error_naming_the_field(fields, names):
    with pytest.raises(ValueError) as e:
        pdkv.Config(**fields)
    assert names in str(e.value)


def test_pickles_for_spawned_ranks():
    import pickle

    c = pdkv.Config(tcp_streams=2, verify_checksum=True, local_ip="10.0.0.1")
    assert pickle.loads(pickle.dumps(c)) == c


def test_immutable_and_replace():
    c = pdkv.Config(tcp_streams=2)
    with pytest.raises(AttributeError):
        c.tcp_streams = 3
    assert c.replace(tcp_streams=None) == pdkv.Config()
    assert c.replace(zmq_sndhwm=5).explicit() == {"tcp_streams": 2, "zmq_sndhwm": 5}
    assert pdkv.Config.from_mapping({"PDKV_TCP_STREAMS": 3, "local_ip": "10.0.0.1"}) == \
        pdkv.Config(tcp_streams=3, local_ip="10.0.0.1")


# --- the table against the C++ readers ------------------------------------------------


def test_defaults_match_the_cpp_readers(clean_env):
    resolved = pdkv.Config().resolved(use_environment=False)
    for s in SETTINGS:
        assert s.env in resolved, f"{s.env}: no C++ reader took it (ucx not built?)"
        text, origin = resolved[s.env]
        assert origin == "default"
        got = s.type(text) if s.type is not bool else text == "true"
        assert got == s.default, (s.env, text, s.default)


def test_every_knob_a_manager_reads_has_a_field():
    names = {s.env for s in SETTINGS}
    missing = set(pdkv.Config().resolved(use_environment=False)) - names
    assert not missing, f"declare a kManager SettingSpec in kv/settings_catalog.cc for: {sorted(missing)}"


def _outside(s: Setting):
    if s.type is int:
        return s.low - 1, s.high + 1
    below = s.low - max(abs(s.low) * 0.01, 1e-6)
    return below, s.high * 1.01


@pytest.mark.parametrize("s", [s for s in SETTINGS if s.low is not None], ids=lambda s: s.env)
def test_ranges_match_the_cpp_readers(s, clean_env):
    for edge in (s.low, s.high):
        value = s.type(edge)
        text, origin = pdkv.Config(**{s.field: value}).resolved(use_environment=False)[s.env]
        assert origin == "explicit" and s.type(text) == value
    for bad in _outside(s):
        # Python refuses it on construction, and so does C++ given the same text.
        with pytest.raises(ValueError, match=s.field):
            pdkv.Config(**{s.field: s.type(bad)})
        with pytest.raises(ValueError, match=s.env):
            pdkv._native.resolve_settings({s.env: s.text(s.type(bad))}, False)


@pytest.mark.parametrize("s", [s for s in SETTINGS if s.choices], ids=lambda s: s.env)
def test_choices_match_the_cpp_readers(s, clean_env):
    for choice in s.choices:
        assert pdkv.Config(**{s.field: choice}).resolved(False)[s.env] == (choice, "explicit")
    with pytest.raises(ValueError, match=s.env):
        pdkv._native.resolve_settings({s.env: "bogus"}, False)


def test_every_field_is_in_the_stub_and_the_docs():
    stub = (pathlib.Path(pdkv.kv.__file__).with_name("kv.pyi")).read_text()
    body = stub.split("class Config:")[1].split("\nclass ")[0]
    stubbed = re.findall(r"^    (\w+): Optional\[(\w+)\]", body, re.M)
    assert stubbed == [(s.field, s.type.__name__) for s in SETTINGS]
    docs = DOCS.read_text()
    for s in SETTINGS:
        assert f"`{s.env}`" in docs, s.env


# --- precedence in a real manager ------------------------------------------------------


def test_resolution_order_explicit_then_environment_then_default(clean_env):
    clean_env.setenv("PDKV_TCP_STREAMS", "7")
    clean_env.setenv("PDKV_ZMQ_SNDHWM", "77")
    r = pdkv.Config(tcp_streams=2).resolved()
    assert r["PDKV_TCP_STREAMS"] == ("2", "explicit")
    assert r["PDKV_ZMQ_SNDHWM"] == ("77", "environment")
    assert r["PDKV_WAITING_TIMEOUT_S"][1] == "default"
    clean_env.setenv("PDKV_TCP_STREAMS", "999")  # bad, but the config's value wins
    assert pdkv.Config(tcp_streams=2).resolved()["PDKV_TCP_STREAMS"] == ("2", "explicit")
    with pytest.raises(ValueError, match="PDKV_TCP_STREAMS=999"):
        pdkv.Config().resolved()


def test_backend_argument_unset_reads_the_environment(clean_env):
    buf = np.zeros(64 * 16, np.uint8)
    clean_env.setenv("PDKV_ENGINE_BACKEND", "rdma")
    # backend left unset: the environment applies (and is refused, naming the variable).
    with pytest.raises(ValueError, match="PDKV_ENGINE_BACKEND=rdma"):
        pdkv.KVManager(decode_args(buf), "decode", "127.0.0.1:1")
    # given in code, it beats the environment.
    pdkv.KVManager(decode_args(buf), "decode", "127.0.0.1:1", backend="tcp").shutdown()
    pdkv.KVManager(decode_args(buf), "decode", "127.0.0.1:1",
                   config=pdkv.Config(engine_backend="tcp")).shutdown()
    with pytest.raises(ValueError, match="contradicts config.engine_backend"):
        pdkv.KVManager(decode_args(buf), "decode", "127.0.0.1:1", backend="shm",
                       config=pdkv.Config(engine_backend="tcp"))


def test_config_local_ip_beats_the_environment(clean_env):
    buf = np.zeros(64 * 16, np.uint8)
    clean_env.setenv("PDKV_LOCAL_IP", "127.0.0.1")
    with pdkv.KVManager(decode_args(buf), "decode", "127.0.0.1:1",
                        config=pdkv.Config(local_ip="127.0.0.2")) as mgr:
        assert "127.0.0.2:" in mgr.control_endpoint
        assert mgr.engine_endpoint.startswith("127.0.0.2:")
    with pdkv.KVManager(decode_args(buf), "decode", "127.0.0.1:1") as mgr:
        assert "127.0.0.1:" in mgr.control_endpoint


def test_config_timeout_beats_the_environment_in_a_real_room(clean_env):
    """A receiver whose prefill never shows up fails after the config's bootstrap timeout
    (0.5 s), not the environment's (100 s)."""
    clean_env.setenv("PDKV_BOOTSTRAP_TIMEOUT_S", "100")
    with room_without_prefill(7, bootstrap_timeout_s=0.5) as receiver:
        start = time.monotonic()
        while receiver.poll() != pdkv.KVPoll.Failed and time.monotonic() - start < 10:
            time.sleep(0.02)
        assert receiver.poll() == pdkv.KVPoll.Failed
        assert time.monotonic() - start < 5
        with pytest.raises(pdkv.KVTransferError) as e:
            receiver.failure_exception()
        assert e.value.cause == pdkv.FailureCause.BootstrapTimeout
