"""`pdkv bench engine` on the hybrid and sparse presets (P12), short: real sender and receiver
processes move each layout and its plain comparison; the JSON record must carry the figure's
keys, every byte of both must verify, and each group must move the blocks a deployment
moves (the window group only the pages of the last 128 tokens)."""
import json
import os
import subprocess

import pytest

CLI = os.path.join(os.environ.get("PDKV_BIN_DIR", "build/bin"), "pdkv")
# 200 tokens of page 16: 13 pages; the 128-token window starts at token 72, inside page 4,
# so the window group moves pages 4..12 (9 pages: 8 whole-window pages + 1 for the start).
TOKENS, PAGE, PAGES, WINDOW_PAGES = 200, 16, 13, 9

EXPECTED_GROUPS = {
    "qwen3-next": [("attention", 24 * PAGES, PAGE * 2048), ("state", 36, 2 << 20)],
    "gpt-oss": [("full", 36 * PAGES, PAGE * 1024), ("window", 36 * WINDOW_PAGES, PAGE * 1024)],
    "deepseek-v32": [("latent", 61 * PAGES, PAGE * 1152), ("indexer", 61 * PAGES, PAGE * 132)],
}
FIGURE_KEYS = {"value", "baseline", "ratio", "ratio_to_plain", "verified", "verified_bytes_ok",
               "unit", "baseline_kind", "target_ratio", "rounds", "plain_rounds", "groups",
               "backend", "model", "tokens", "page", "blocks", "bytes_per_round"}


@pytest.mark.parametrize("model", sorted(EXPECTED_GROUPS))
def test_hybrid_layout_moves_every_group_and_verifies(tmp_path, model):
    out = tmp_path / "p12.json"
    r = subprocess.run([CLI, "bench", "engine", "--model", model, "--tokens", str(TOKENS),
                        "--page", str(PAGE), "--rounds", "2", "--json", str(out)],
                       capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, f"bench engine exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    fig = json.loads(out.read_text())["P12"]
    assert FIGURE_KEYS <= set(fig), FIGURE_KEYS - set(fig)
    assert fig["verified"] is True and fig["verified_bytes_ok"] is True
    assert fig["model"] == model and fig["target_ratio"] == 0.9
    assert fig["value"] > 0 and fig["baseline"] > 0
    assert fig["ratio_to_plain"] == pytest.approx(fig["value"] / fig["baseline"])
    assert len(fig["rounds"]) == 2 and len(fig["plain_rounds"]) == 2
    groups = [(g["name"], g["blocks"], g["block_bytes"]) for g in fig["groups"]]
    assert groups == EXPECTED_GROUPS[model]
    assert fig["blocks"] == sum(g["blocks"] for g in fig["groups"])
    assert fig["bytes_per_round"] == sum(g["bytes"] for g in fig["groups"])
    assert "| P12 |" in r.stdout


def test_hybrid_preset_refuses_head_split(tmp_path):
    r = subprocess.run([CLI, "bench", "engine", "--model", "gpt-oss", "--tokens", "32",
                        "--head-split", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "head-split" in r.stderr
