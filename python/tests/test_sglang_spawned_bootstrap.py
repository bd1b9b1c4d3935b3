"""sglang's bootstrap server in a spawned child that never loads plugins: one sglang version
(disagg_service.py) starts it with the multiprocessing spawn context, resolves
``--disaggregation-transfer-backend`` in the child with TransferBackend(name) and
get_kv_class, supervises ``server.thread`` and polls /health. pdkv's .pth file (shipped by
the wheel and the .deb) makes the name resolvable there; without it the child fails as
sglang reports an unknown backend. Real processes, a real pdkv bootstrap server."""
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request

import pytest

from engine_replay import STANDINS
from sglang_plugin_site import REPO, make_plugin_site

SHIPPED_PTH = os.path.join(REPO, "python", "packaging", "pdkv-sglang.pth")
HERE = os.path.dirname(os.path.abspath(__file__))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launcher(tmp_path, with_pth: bool, port: int = 0) -> dict:
    """Runs the launcher in a fresh interpreter whose user site holds (or not) pdkv's .pth,
    as site-packages would after installing pdkv."""
    userbase = tmp_path / ("userbase" if with_pth else "bare")
    env = dict(os.environ, PYTHONUSERBASE=str(userbase),
               PYTHONPATH=os.pathsep.join([STANDINS, make_plugin_site(str(tmp_path / "site")),
                                           HERE, os.environ["PYTHONPATH"]]))
    env.pop("PYTHONNOUSERSITE", None)
    usersite = subprocess.run(
        [sys.executable, "-c", "import site; print(site.getusersitepackages())"],
        env=env, capture_output=True, text=True, check=True).stdout.strip()
    os.makedirs(usersite, exist_ok=True)
    if with_pth:
        shutil.copy(SHIPPED_PTH, usersite)
    out = subprocess.run([sys.executable, os.path.join(HERE, "sglang_spawn_driver.py"),
                          str(port or _free_port())], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_spawned_child_resolves_pdkv_and_serves_until_closed(tmp_path):
    got = _launcher(tmp_path, with_pth=True)
    assert "error" not in got, got
    assert got["child_alive"] and got["child_pid"] != os.getpid()
    assert got["health"] == 200
    assert got["query"] == [200, "{}"] or json.loads(got["query"][1]) == {}, got["query"]
    assert got["closed"] and got["port_free"], got


def test_without_the_pth_the_child_does_not_know_pdkv(tmp_path):
    # What sglang's spawned child does with only the plugin entry point installed.
    got = _launcher(tmp_path, with_pth=False)
    assert "pdkv" in got.get("error", ""), got


def test_a_port_in_use_fails_the_start_with_the_childs_reason(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        got = _launcher(tmp_path, with_pth=True, port=busy.getsockname()[1])
    # the name resolved in the child; pdkv's server refused the port, and the parent says so
    assert "PD bootstrap server failed to start" in got.get("error", ""), got
    assert "Address already in use" in got["error"], got


def test_bootstrap_server_thread_lives_while_serving():
    sys.path.insert(0, STANDINS)
    from pdkv.integrations.sglang.conn import PdkvKVBootstrapServer
    server = PdkvKVBootstrapServer(host="127.0.0.1", port=0)
    try:
        assert server.thread.is_alive()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=5) as r:
            assert r.status == 200
    finally:
        server.close()
    server.thread.join(5)
    assert not server.thread.is_alive()


@pytest.mark.parametrize("then_plugins", [False, True])
def test_name_only_hook_adds_pdkv_and_takes_nothing_over(then_plugins, tmp_path):
    # The .pth line, then (as in sglang's own processes) the plugin too: pdkv resolves,
    # nixl stays sglang's (its import fails here: NIXL is absent).
    code = ("import pdkv.integrations.sglang as i; i.register_on_import()\n"
            + ("from sglang.srt.plugins import load_plugins; load_plugins()\n" if then_plugins
               else "")
            + "from sglang.srt.disaggregation.utils import get_kv_class, TransferBackend as B,"
              " KVClassType as T\n"
              "print(get_kv_class(B('pdkv'), T.BOOTSTRAP_SERVER).__name__)\n"
              "try:\n    get_kv_class(B.NIXL, T.SENDER)\nexcept ImportError:\n"
              "    print('nixl=sglang')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [STANDINS, make_plugin_site(str(tmp_path / "site")), os.environ["PYTHONPATH"]]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PdkvKVBootstrapServer", "nixl=sglang"]


def test_takeover_after_the_name_only_hook_keeps_both_names(tmp_path):
    code = ("import pdkv.integrations.sglang as i; i.register_on_import(); i.install()\n"
            "from sglang.srt.disaggregation.utils import get_kv_class, TransferBackend as B,"
            " KVClassType as T\n"
            "print(get_kv_class(B('pdkv'), T.SENDER).__name__,"
            " get_kv_class(B.NIXL, T.SENDER).__name__)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([STANDINS, os.environ["PYTHONPATH"]]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PdkvKVSender", "PdkvKVSender"]
