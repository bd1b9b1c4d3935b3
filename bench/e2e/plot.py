"""`--plot FILE`: the figure of a round-based run (latency, scale, layerwise).

Two panels side by side, throughput (GB/s) on the left, p50 and p99 latency (ms, from a
request's last send on the prefill to Success on every decode rank) on the right, over
one of two x axes:
- a sweep (--concurrency lists several values): against the requests per round, on a
  log2 axis; each point is the figure of that concurrency (median GB/s of its timed
  rounds, latency percentiles over all their samples), and each timed round's GB/s is
  drawn faintly behind its median so the spread shows;
- one concurrency (every case's default): against the timed rounds of the run, each
  round's own GB/s and latency percentiles, with the run's figure as a dotted line.
Latency goes on a log scale where it spans more than a factor of ten (always in a sweep:
from one request to a thousand it grows by orders of magnitude).
The latency case's requests go one at a time, so there "requests per round" is not
concurrency and the x label says so.

matplotlib (Debian's python3-matplotlib, scripts/install-deps.sh) draws it; the format
follows FILE's extension (.png, .svg, .pdf). An SVG keeps its text as text and names each
series (the gids in SERIES), so a reader or a test can find them in the file."""
from __future__ import annotations

from typing import Optional

# Series ids in the drawn figure (Line2D gids, element ids in an SVG).
SERIES = {"throughput": "throughput", "throughput_rounds": "throughput-rounds",
          "p50": "latency-p50", "p99": "latency-p99"}
FORMATS = (".png", ".svg", ".pdf")  # what --plot writes, by the file name's extension
THROUGHPUT_LABEL = "throughput (GB/s)"
LATENCY_LABEL = "latency (ms)"


def _ms(us: Optional[float]) -> Optional[float]:
    return None if us is None else us / 1000.0


def _points(xs, ys):
    """The (x, y) pairs whose y is known (a round where no room succeeded has none)."""
    pairs = [(x, y) for x, y in zip(xs, ys) if y is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def draw(rows: list, round_figs: list, title: str, sequential: bool = False):
    """The matplotlib Figure for `rows` (report.merge, one per concurrency) and
    `round_figs` (rounds.round_figure, one per timed round). A sweep when rows hold
    more than one concurrency, else the rounds. Raises ValueError when nothing was
    measured (no row with a figure)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.get("gbps") is not None]
    if not rows:
        raise ValueError("no round succeeded, nothing to plot")
    fig, (thr, lat) = plt.subplots(1, 2, figsize=(11, 4.5))
    if len(rows) > 1:
        _draw_sweep(thr, lat, rows, round_figs, sequential)
    else:
        _draw_rounds(thr, lat, rows[0], [f for f in round_figs
                                         if f["concurrency"] == rows[0]["concurrency"]],
                     sequential)
    thr.set_ylabel(THROUGHPUT_LABEL)
    highest = max(f["gbps"] for f in rows + round_figs if f.get("gbps") is not None)
    thr.set_ylim(0, highest * 1.15)  # from zero, so a dip reads as its true size
    lat.set_ylabel(LATENCY_LABEL)
    for ax in (thr, lat):
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig


def _draw_sweep(thr, lat, rows, round_figs, sequential) -> None:
    conc = [r["concurrency"] for r in rows]
    dots = [f for f in round_figs if f.get("gbps") is not None]
    if dots:
        thr.plot([f["concurrency"] for f in dots], [f["gbps"] for f in dots], "o",
                 color="tab:blue", alpha=0.25, markersize=4, label="each timed round",
                 gid=SERIES["throughput_rounds"])
    thr.plot(conc, [r["gbps"] for r in rows], "o-", color="tab:blue",
             label="median of the rounds", gid=SERIES["throughput"])
    for key, style, name in (("lat_p50_us", "o-", "p50"), ("lat_p99_us", "s--", "p99")):
        xs, ys = _points(conc, [_ms(r[key]) for r in rows])
        lat.plot(xs, ys, style, label=name, gid=SERIES[name])
    lat.set_yscale("log")
    xlabel = ("requests per round (sent one at a time)" if sequential
              else "concurrent requests per round")
    for ax in (thr, lat):
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_xlabel(xlabel)


def _draw_rounds(thr, lat, row, round_figs, sequential) -> None:
    n = [f["round"] for f in round_figs]
    xs, ys = _points(n, [f["gbps"] for f in round_figs])
    thr.plot(xs, ys, "o-", color="tab:blue", label="each timed round", gid=SERIES["throughput"])
    thr.axhline(row["gbps"], color="tab:blue", linestyle=":",
                label=f"median {row['gbps']:.3g} GB/s")
    for key, style, name, color in (("lat_p50_us", "o-", "p50", "tab:orange"),
                                    ("lat_p99_us", "s--", "p99", "tab:red")):
        xs, ys = _points(n, [_ms(f[key]) for f in round_figs])
        lat.plot(xs, ys, style, color=color, label=f"{name} of the round", gid=SERIES[name])
        if row.get(key) is not None:
            lat.axhline(_ms(row[key]), color=color, linestyle=":",
                        label=f"{name} of the run {_ms(row[key]):.3g} ms")
    known = [f[k] for f in round_figs for k in ("lat_p50_us", "lat_p99_us") if f[k]]
    if known and max(known) > 10 * min(known):
        lat.set_yscale("log")  # a p99 far above the p50 would flatten the p50 at zero
    else:
        lat.set_ylim(bottom=0)
    from matplotlib.ticker import MaxNLocator
    each = f"{row['concurrency']} requests each" + (", one at a time" if sequential else "")
    for ax in (thr, lat):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"timed round ({each})")


def write(path: str, rows: list, round_figs: list, title: str, sequential: bool = False) -> None:
    """Draws (draw) and saves to `path`, in the format its extension names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "pdkv"}):
        fig = draw(rows, round_figs, title, sequential)
        try:
            fig.savefig(path)
        finally:
            plt.close(fig)
