"""`pdkv demo` as the README runs it: under a cluster secret it makes for itself, said once,
with no process left unauthenticated, and still moving and checking its bytes."""
import os
import re
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster_secret import ENV, SECRET_BYTES, demo_secret  # noqa: E402

CLI = os.path.join(os.environ.get("PDKV_BIN_DIR", "build/bin"), "pdkv")


def run_demo(*args, env=None, rc=0):
    r = subprocess.run([CLI, "demo", *args], capture_output=True, text=True, timeout=180,
                       env=env)
    out = r.stdout + r.stderr
    assert r.returncode == rc, f"pdkv demo exited {r.returncode}, not {rc}:\n{out}"
    return out


def run_headers(out):
    return re.findall(r"^=== run (\d+)/(\d+): (.*) ===$", out, re.M)


def secret_lines(out):
    return [line for line in out.splitlines() if line.startswith("cluster secret:")]


def without_secret():
    env = dict(os.environ)
    env.pop(ENV, None)
    return env


def test_demo_makes_its_secret_and_no_process_is_unauthenticated():
    out = run_demo(env=without_secret())
    assert "UNAUTHENTICATED" not in out and "NO CLUSTER SECRET" not in out, out
    lines = secret_lines(out)
    assert len(lines) == 1 and "made one for this demo" in lines[0], out
    path = re.search(r"mode 600, (\S+), removed at exit", lines[0]).group(1)
    assert not os.path.exists(os.path.dirname(path)), "the secret's directory outlived the demo"
    # Every hand-over the README names ran, each moving its KV cache (real pages, real
    # processes) and matching the colocated run.
    titles = [t for _, _, t in run_headers(out)]
    assert titles == ["dense transformer, prefill TP 1 -> decode TP 1, whole-prompt prefill",
                      "dense transformer, prefill TP 1 -> decode TP 2, chunked prefill",
                      "hybrid model (attention KV + recurrent state), prefill TP 1 -> "
                      "decode TP 1, chunked prefill"], out
    assert len(re.findall(r"^prefill sent \d+ pages", out, re.M)) == 3, out
    assert re.search(r"^decode rank 1: received into pages", out, re.M), out
    assert re.search(r"^state: \d+ bytes of slot \d+", out, re.M), out
    assert out.count("OK: disaggregated == colocated") == 3 and "MISMATCH" not in out, out
    # The engine benchmark ran under the same secret and checked every byte it moved.
    assert re.search(r"^\| P1 \|.*\| yes \|$", out, re.M), out


def test_demo_uses_a_secret_already_set(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"k" * SECRET_BYTES)
    os.chmod(secret, 0o600)
    out = run_demo("--no-bench", "--tokens", "4", "--prompt-len", "12",
                   env=dict(without_secret(), **{ENV: str(secret)}))
    assert secret_lines(out) == [f"cluster secret: PDKV_SECRET_FILE from the environment "
                                 f"({secret})"], out
    assert "UNAUTHENTICATED" not in out, out
    assert "OK: disaggregated == colocated" in out, out
    assert secret.read_bytes() == b"k" * SECRET_BYTES  # the user's file is left alone


def test_a_flag_selects_one_run():
    out = run_demo("--no-bench", "--tp-decode", "2", "--chunked", "--tokens", "4")
    assert [(i, n) for i, n, _ in run_headers(out)] == [("1", "1")], out
    assert "decode TP 2, chunked prefill" in out, out
    assert re.search(r"^decode rank 1: received into pages", out, re.M), out
    assert out.count("OK: disaggregated == colocated") == 1, out


def test_hybrid_run_fails_when_the_state_is_left_behind():
    """The check is not vacuous: the hybrid run whose prefill keeps its recurrent state
    (a test-only flag) reports MISMATCH and the demo exits 1, while the same run with the
    state moved passes."""
    out = run_demo("--no-bench", "--model", "hybrid", "--tokens", "8")
    assert "OK: disaggregated == colocated" in out, out
    out = run_demo("--no-bench", "--model", "hybrid", "--tokens", "8", "--drop-state-for-test",
                   rc=1)
    assert "MISMATCH: disaggregated tokens differ" in out, out
    assert "1 of 1 run(s) MISMATCHED" in out, out


def test_secret_file_is_private_random_and_removed(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    seen = []
    with demo_secret() as (path, made):
        assert made and os.environ[ENV] == path
        st, dir_st = os.lstat(path), os.lstat(os.path.dirname(path))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert stat.S_IMODE(dir_st.st_mode) == 0o700 and st.st_uid == os.getuid()
        data = open(path, "rb").read()
        assert len(data) == SECRET_BYTES
        seen.append(data)
    assert ENV not in os.environ and not os.path.exists(os.path.dirname(path))
    with demo_secret() as (_, _made):
        seen.append(open(os.environ[ENV], "rb").read())
    assert seen[0] != seen[1], "two demos drew the same secret"


def test_secret_is_removed_when_the_demo_fails(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    try:
        with demo_secret() as (path, _):
            raise RuntimeError("the demo failed")
    except RuntimeError:
        pass
    assert ENV not in os.environ and not os.path.exists(os.path.dirname(path))
