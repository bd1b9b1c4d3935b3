"""`pdkv bench e2e --case scale --model qwen3-next|gpt-oss|deepseek-v32` (P12 end to end): a
tiny real run of each preset (a bootstrap server per arm, two prefill ranks, one decode
rank, a few rooms, one timed round per arm) whose JSON must say every room succeeded and
every byte of every group and state slot matched; and the presets' geometry against the
engine bench's (bench/engine/engine_hybrid_workload.cc) at the sizes both use."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

import pdkv

CLI = os.path.join(os.environ.get("PDKV_BIN_DIR", "build/bin"), "pdkv")
E2E = os.path.join(os.path.dirname(pdkv.__file__), "_tools", "bench", "e2e")
TINY = ["--case", "scale", "--concurrency", "3", "--rounds", "1", "--prefill-tp", "2",
        "--decode-tp", "1", "--no-baselines"]


def load_presets():
    """bench/e2e/hybrid_presets.py as the CLI runs it: the copy inside the package."""
    sys.path.insert(0, E2E)  # it imports its siblings by name, as main.py does
    try:
        spec = importlib.util.spec_from_file_location("pdkv_e2e_hybrid_presets",
                                                      os.path.join(E2E, "hybrid_presets.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(E2E)


presets = load_presets()


@pytest.mark.parametrize("model,groups", [("qwen3-next", {"attention", "state"}),
                                          ("gpt-oss", {"full", "window"}),
                                          ("deepseek-v32", {"latent", "indexer"})])
def test_hybrid_scale_run_moves_and_verifies_every_group(tmp_path, model, groups):
    out = tmp_path / "p12.json"
    r = subprocess.run([CLI, "bench", "e2e", *TINY, "--model", model, "--json", str(out)],
                       capture_output=True, text=True, timeout=200)
    assert r.returncode == 0, f"bench e2e exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    fig = json.loads(out.read_text())["P12"]
    assert fig["verified_bytes_ok"] and fig["all_succeeded"] and fig["failed_rooms"] == 0
    run = fig["runs"][0]
    # Both arms ran their warm-up and timed round, each checked on the decode.
    assert run["rounds_run"] == run["rounds_planned"] == 4
    assert all(row["bytes_ok"] for row in run["rows"] + run["plain_rows"])
    hybrid = [g for g in fig["groups"] if g["arm"] == "hybrid"]
    assert {g["group"] for g in hybrid} == groups
    assert fig["request_bytes"] == sum(g["bytes_per_room"] for g in hybrid)
    assert fig["value"] > 0 and fig["baseline"] > 0
    assert fig["ratio_to_plain"] == pytest.approx(fig["value"] / fig["baseline"])
    # The plain arm moves about the same bytes per room (whole llama-style layers).
    assert abs(fig["plain_request_bytes"] / fig["request_bytes"] - 1) < 0.1


def test_hybrid_presets_outside_the_scale_case_are_refused():
    r = subprocess.run([CLI, "bench", "e2e", "--case", "latency", "--model", "gpt-oss"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "scale case only" in r.stderr


def test_geometry_is_the_engine_bench_at_its_size_and_scaled_at_the_scale_case():
    # At the engine bench's 4096 tokens, page 16: its table in BENCHMARKS.md (P12).
    q = presets.HYBRID["qwen3-next"].scaled(4096)
    state = q.groups[1]
    assert state.heads * state.head_bytes == 2 << 20 and state.pages_moved(4096, 16) == 1
    g = presets.HYBRID["gpt-oss"].scaled(4096)
    assert [x.pages_moved(4096, 16) for x in g.groups] == [256, 8]
    d = presets.HYBRID["deepseek-v32"].scaled(4096)
    assert d.decode_room_bytes(4096, 16, 1) == 61 * 4096 * (1152 + 132)
    # The scale case's request: the state slot and the window scaled by 16 / 4096.
    state16 = presets.HYBRID["qwen3-next"].scaled(16).groups[1]
    assert state16.heads * state16.head_bytes == 8 << 10
    g32 = presets.HYBRID["gpt-oss"].scaled(32)
    assert [x.pages_moved(32, 16) for x in g32.groups] == [2, 1]
    # The plain arm: llama-style heads, or the model's own (--plain-heads model), about the
    # hybrid room's bytes; gpt-oss's own heads match it exactly (27 layers x 2 pages).
    plain = presets.plain_preset(g32, 32, 16, 2)
    assert (plain.groups[0].heads, plain.groups[0].head_bytes) == (8, 256)
    own = presets.plain_preset(g32, 32, 16, 2, own_heads=True)
    assert (own.groups[0].buffers, own.groups[0].head_bytes) == (54, 128)
    assert own.decode_room_bytes(32, 16, 2) == g32.decode_room_bytes(32, 16, 2)
    # Unsliced groups (MLA latent, indexer) land whole on every decode rank.
    d16 = presets.HYBRID["deepseek-v32"].scaled(16)
    assert d16.decode_room_bytes(16, 16, 2) == 2 * d16.decode_room_bytes(16, 16, 1)
