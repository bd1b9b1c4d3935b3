"""`pdkv bench e2e --plot`: a small real sweep and a small run of rounds, each drawn into an
SVG whose content is checked (axes, series, points, units), and the drawing itself on
figures known in advance (latency in ms, one point per concurrency or per round)."""
import importlib.util
import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest

import pdkv

CLI = os.path.join(os.environ.get("PDKV_BIN_DIR", "build/bin"), "pdkv")
SVG = "{http://www.w3.org/2000/svg}"
# A fast cluster: one prefill and one decode rank, one page of the tiny model per request.
FAST = ["--case", "scale", "--model", "tiny", "--tokens", "16", "--page", "16",
        "--prefill-tp", "1", "--decode-tp", "1", "--no-baselines"]


def load_plot():
    """bench/e2e/plot.py as the CLI runs it: the copy inside the package."""
    path = os.path.join(os.path.dirname(pdkv.__file__), "_tools", "bench", "e2e", "plot.py")
    spec = importlib.util.spec_from_file_location("pdkv_e2e_plot", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plot = load_plot()


def run_bench(tmp_path, *args):
    out_json, svg = tmp_path / "e2e.json", tmp_path / "e2e.svg"
    r = subprocess.run([CLI, "bench", "e2e", *FAST, *args, "--json", str(out_json),
                        "--plot", str(svg)], capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, f"bench e2e exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    assert f"plot: {svg}" in r.stdout
    return json.loads(out_json.read_text()), ET.parse(svg).getroot()


def texts(root) -> list:
    return ["".join(t.itertext()).strip() for t in root.iter(SVG + "text")]


def points(root, series: str) -> int:
    """Markers drawn for one series (plot.SERIES): one per point."""
    groups = [g for g in root.iter(SVG + "g") if g.get("id") == plot.SERIES[series]]
    assert len(groups) == 1, f"series {series!r} is not in the plot"
    return len(list(groups[0].iter(SVG + "use")))


def test_sweep_draws_throughput_and_latency_against_concurrency(tmp_path):
    figures, root = run_bench(tmp_path, "--concurrency", "1,4,16", "--rounds", "2")
    rows = figures["e2e"]["rows"]
    assert [r["concurrency"] for r in rows] == [1, 4, 16] and figures["P6"]["verified_bytes_ok"]
    words = texts(root)
    assert plot.THROUGHPUT_LABEL in words and plot.LATENCY_LABEL in words
    assert words.count("concurrent requests per round") == 2  # both panels' x axis
    assert {"1", "4", "16"} <= set(words)  # the concurrencies are the x ticks
    assert any(w.startswith("pdkv bench e2e --case scale: tiny, 16 tokens") for w in words)
    assert {"p50", "p99", "median of the rounds", "each timed round"} <= set(words)
    assert points(root, "throughput") == 3
    assert points(root, "p50") == 3 and points(root, "p99") == 3
    assert points(root, "throughput_rounds") == 3 * 2  # every timed round behind its median


def test_one_concurrency_draws_the_rounds_of_the_run(tmp_path):
    figures, root = run_bench(tmp_path, "--concurrency", "4", "--rounds", "3")
    assert figures["P6"]["verified_bytes_ok"]
    words = texts(root)
    assert words.count("timed round (4 requests each)") == 2
    assert plot.THROUGHPUT_LABEL in words and plot.LATENCY_LABEL in words
    assert {"p50 of the round", "p99 of the round", "each timed round"} <= set(words)
    assert any(w.startswith("median ") and w.endswith(" GB/s") for w in words)
    assert points(root, "throughput") == 3
    assert points(root, "p50") == 3 and points(root, "p99") == 3


def row(conc, gbps, p50_us, p99_us):
    return {"concurrency": conc, "gbps": gbps, "req_per_s": 1.0, "lat_p50_us": p50_us,
            "lat_p99_us": p99_us}


def lines_by_series(fig) -> dict:
    return {line.get_gid(): line for ax in fig.axes for line in ax.get_lines()
            if line.get_gid()}


def test_sweep_values_latency_in_ms():
    rows = [row(1, 0.5, 1500.0, 2500.0), row(8, 1.0, 3000.0, 9000.0)]
    rounds = [dict(row(c, g, None, None), round=1) for c, g in ((1, 0.4), (8, 1.1))]
    fig = plot.draw(rows, rounds, "t")
    got = lines_by_series(fig)
    assert list(got["latency-p50"].get_xdata()) == [1, 8]
    assert list(got["latency-p50"].get_ydata()) == [1.5, 3.0]
    assert list(got["latency-p99"].get_ydata()) == [2.5, 9.0]
    assert list(got["throughput"].get_ydata()) == [0.5, 1.0]
    assert list(got["throughput-rounds"].get_ydata()) == [0.4, 1.1]
    assert fig.axes[1].get_ylabel() == "latency (ms)"


def test_rounds_skip_a_round_without_figures():
    figures = ((1.0, 100.0, 200.0), (None, None, None), (2.0, 300.0, 600.0))
    rounds = [dict(row(4, *f), round=i) for i, f in enumerate(figures, 1)]
    fig = plot.draw([row(4, 1.5, 200.0, 600.0)], rounds, "t")
    got = lines_by_series(fig)
    assert list(got["throughput"].get_xdata()) == [1, 3]
    assert list(got["latency-p50"].get_ydata()) == [0.1, 0.3]


def test_nothing_measured_is_an_error():
    with pytest.raises(ValueError, match="nothing to plot"):
        plot.draw([row(4, None, None, None)], [], "t")
