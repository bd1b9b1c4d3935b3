"""`pdkv bench e2e`: pdkv end to end over real processes (a bootstrap server, prefill and
decode ranks on loopback), one case at a time (BENCHMARKS.md's targets in parentheses):
- latency (P5): how long a one-page request takes from the prefill's last send to Success
  on the decode, p50 and p99, against a ZeroMQ round trip measured in the same run;
- scale (P6): throughput (GB/s) and latency of 1024 concurrent requests from 4 prefill
  ranks to 2 decode ranks, every byte checked, against the engine alone (P1) measured in
  the same run; with --model qwen3-next, gpt-oss or deepseek-v32, hybrid rooms (state
  slots, sliding-window layers, indexer pages) against plain rooms of the same bytes (P12,
  hybrid_main.py);
- layerwise (P7): how long after a simulated forward ends (--layer-ms per layer) the last
  of its KV lands, each layer sent as soon as it is computed;
- soak (P8): minutes of Poisson arrivals of mixed sizes; failures, throughput, memory.

Run as `build/bin/pdkv bench e2e --case latency|scale|layerwise|soak|mixed [...]` (mixed:
mixed.py); the CLI runs
this copy of the script inside the package (pdkv/_tools/bench/e2e) with the package's parent
on PYTHONPATH and PDKV_BIN_DIR set to its own directory. Progress: a tqdm bar on a terminal,
plain lines otherwise (pdkv._progress). --repeat N runs the case N times, each on a fresh
cluster; --hogs N runs N CPU busy loops beside it. The JSON is written whatever happens
(failed rooms, a dead rank, a timeout, an exception, Ctrl-C): a failed run is a result.
--plot draws throughput and latency against --concurrency's values, or per round (plot.py)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import auth_ab  # noqa: E402
import baselines  # noqa: E402
import cpu_cost  # noqa: E402
import failures  # noqa: E402
import hybrid_presets  # noqa: E402
from pdkv.testing.hogs import Hogs  # noqa: E402
import latency  # noqa: E402
import plot  # noqa: E402
import report  # noqa: E402
import results  # noqa: E402
import rounds  # noqa: E402
import soak  # noqa: E402
from presets import PRESETS  # noqa: E402

# Per case: model, tokens, page, prefill TP, decode TP, concurrency, rounds.
CASE_DEFAULTS = {
    # One page of one token: 64 x 2 KiB blocks, so latency is not dominated by bandwidth.
    # Warm samples (latency.MODES): 101 rooms per round sent one at a time, 10 timed
    # rounds: 1,000 samples (a round's first room is none, report.summarize), so the p99
    # is set by ten samples, not two; the ZeroMQ baseline has 2,000 (latency.ZMQ_SAMPLES).
    "latency": ("llama3-8b", 1, 1, 1, 1, "101", 10),
    # 1024 concurrent requests of llama3-8b x 16 tokens = 2 MiB each, 2 GiB per round on each
    # side: 4 k tokens each would be 0.5 TB, far above the machine's 24 GiB.
    "scale": ("llama3-8b", 16, 16, 4, 2, "1024", 10),
    "layerwise": ("llama3-8b", 1024, 16, 1, 1, "1", 5),
    # Sizes come from the distribution (soak.py), one continuous run instead of rounds;
    # heterogeneous TP 2 -> 1 so every room is gathered from two prefill ranks.
    "soak": ("llama3-8b", 0, 16, 2, 1, "1", 0),
}
# Decode polling per case (polling.py). Latency: 9 runs of 300 samples per mode on the
# 2-core machine (2026-12-03, pre-pipelining transfer path, other builds running), medians
# over runs: spin p50 667 / p99 5593 us, 20 us sleeps 764 / 4295, 50 us sleeps 596 / 2997.
# Sleeping 50 us wins both: a spinning decode takes one of the two cores from the threads
# that move the bytes, and a 20 us sleep wakes too often to leave them that core. Since
# P5's samples end one after another (warm, latency.py), "wait" wakes on each room's end
# and beat 50 us sleeps (polling.py); it is the latency case's default since 2026-12-05.
DECODE_POLL = {"latency": "wait", "scale": "engine", "layerwise": "engine", "soak": "engine"}
# Soak default rate: ~0.13 GB/s offered (mean ~63 MiB per request at page 16), a small
# fraction of what the scale case moves on this machine, so a sustained load, not overload.
SOAK_RATE = 2.0


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, and the description's list kept as written."""


def parse():
    ap = argparse.ArgumentParser(prog="pdkv bench e2e", description=__doc__.split("\n\n")[0],
                                 formatter_class=_HelpFormatter)
    ap.add_argument("--case", choices=sorted(CASE_DEFAULTS), default="scale",
                    help="what is measured (see above): latency (P5), scale (P6), layerwise "
                    "(P7) or soak (P8); sets the defaults of the geometry options below")
    ap.add_argument("--model", choices=sorted(set(PRESETS) | set(hybrid_presets.HYBRID)),
                    help="KV geometry preset (presets.py); with --case scale, qwen3-next, "
                    "gpt-oss and deepseek-v32 move hybrid rooms (P12, hybrid_presets.py)")
    ap.add_argument("--tokens", type=int, help="prompt length (tokens) of each request")
    ap.add_argument("--page", type=int, help="page size (tokens)")
    ap.add_argument("--prefill-tp", type=int, help="prefill ranks (tensor parallel size)")
    ap.add_argument("--decode-tp", type=int, help="decode ranks (tensor parallel size)")
    ap.add_argument("--concurrency", help="requests per round; a list (1,8,64) sweeps")
    ap.add_argument("--rounds", type=int, help="timed rounds per concurrency (+1 warm-up)")
    ap.add_argument("--backend", default="tcp", choices=["tcp", "shm"], help="transfer engine backend")
    ap.add_argument("--layer-ms", type=float, default=5.0, help="simulated ms per layer (P7)")
    ap.add_argument("--layerwise-interval", type=int, default=1,
                    help="layers per send in the layerwise case (P7)")
    ap.add_argument("--no-baselines", action="store_true",
                    help="skip the reference runs (iperf3; the engine alone, P1): quicker, but "
                    "no ratio to them")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="s a rank waits for its rooms (a round; the soak's drain)")
    ap.add_argument("--json", help="write the figures to this file (written whatever happens)")
    ap.add_argument("--plot", metavar="FILE",
                    help="draw throughput (GB/s) and p50/p99 latency (ms) of the last run into "
                    "FILE (.png, .svg or .pdf): against the requests per round when "
                    "--concurrency lists several (e.g. 1,4,16,64,256,1024), else per timed "
                    "round")
    g = ap.add_argument_group("robustness")
    g.add_argument("--repeat", type=int, default=1,
                   help="runs of the case, each on a fresh cluster")
    g.add_argument("--hogs", type=int, default=0, help="CPU busy loops beside the cluster")
    g.add_argument("--rank-env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of every rank (e.g. PDKV_BOOTSTRAP_TIMEOUT_S=0.1)")
    g.add_argument("--kill-rank", metavar="NAME", help="SIGKILL rank NAME (e.g. decode0) "
                   "--kill-after-s after each cluster is up: checks failure reporting")
    g.add_argument("--kill-after-s", type=float, default=2.0, help="delay of --kill-rank")
    g.add_argument("--kill-signal", default="KILL", help="KILL (a dead rank) or STOP (a hung one)")
    g.add_argument("--decode-poll", choices=["spin", "sleep", "engine", "wait"],
                   help="decode polling (polling.py); default per case")
    g.add_argument("--latency-mode", choices=latency.MODES, default="both",
                   help="latency (P5): warm = a round's rooms sent one at a time, each after "
                   "the previous ended (the headline, like its back-to-back baseline); cold = "
                   "one room per round, idle in between (reported under `cold`); both")
    g.add_argument("--cold-samples", type=int, default=200,
                   help="latency: rounds of one room each in the cold mode")
    g.add_argument("--idle-gap-ms", type=float, default=10.0,
                   help="latency: idle before each ping of the cold mode's ZeroMQ baseline")
    g.add_argument("--poll-sleep-us", type=float, default=50.0,
                   help="sleep between poll passes with --decode-poll sleep")
    g.add_argument("--plain-heads", choices=["llama", "model"], default="llama",
                   help="scale with a hybrid --model (P12): the plain arm's KV heads, llama-style "
                   "(8 x 128 x bf16) or the model's first KV group's (hybrid_presets.py)")
    g.add_argument("--auth-ab", action="store_true",
                   help="scale only: what the cluster secret costs, a cluster with "
                   "PDKV_SECRET_FILE and one without, rounds interleaved in one run (JSON key "
                   "P6_auth; auth_ab.py)")
    g.add_argument("--auth-ab-first", choices=["off", "on"], default="off",
                   help="with --auth-ab: which cluster starts first")
    g.add_argument("--auth-ab-control", action="store_true",
                   help="with --auth-ab: neither cluster has a secret (an A/A run: the "
                   "comparison's own bias)")
    s = ap.add_argument_group("soak (P8)")
    s.add_argument("--rate", type=float, default=SOAK_RATE, help="Poisson arrivals, requests/s")
    s.add_argument("--minutes", type=float, default=3.0, help="length of the arrival schedule")
    s.add_argument("--seed", type=int, default=1, help="seed of the arrival schedule")
    s.add_argument("--max-tokens", type=int, default=4096, help="largest request (tokens)")
    s.add_argument("--expect-latency-s", type=float, default=1.0,
                   help="latency assumed when sizing the page pool (Little's law)")
    s.add_argument("--pool-limit-gib", type=float, default=2.0, help="largest pool per rank")
    a = ap.parse_args()
    hybrid_presets.apply_defaults(a)
    d = CASE_DEFAULTS[a.case]
    for name, v in zip(("model", "tokens", "page", "prefill_tp", "decode_tp", "concurrency",
                        "rounds"), d):
        if getattr(a, name) is None:
            setattr(a, name, v)
    if a.decode_poll is None:
        a.decode_poll = DECODE_POLL[a.case]
    a.sequential = False  # set per mode by latency.modes()
    if a.cold_samples < 1 or a.idle_gap_ms < 0:
        ap.error("--cold-samples >= 1, --idle-gap-ms >= 0")
    if a.case != "soak" and a.tokens % a.page:
        ap.error("--tokens must be a multiple of --page")
    if a.repeat < 1 or a.hogs < 0 or a.rate <= 0 or a.minutes <= 0 or a.max_tokens < 1:
        ap.error("--repeat >= 1, --hogs >= 0, --rate > 0, --minutes > 0, --max-tokens >= 1")
    try:
        a.rank_env = dict(kv.split("=", 1) for kv in a.rank_env)
    except ValueError:
        ap.error("--rank-env takes KEY=VALUE")
    a.concurrency = [int(c) for c in str(a.concurrency).split(",")]
    if a.case == "latency" and a.latency_mode != "cold" and min(a.concurrency) < 2:
        ap.error("--latency-mode warm/both sends a round's rooms one at a time and takes no "
                 "sample of its first: --concurrency must be >= 2 (101 by default)")
    if a.auth_ab and a.case != "scale":
        ap.error("--auth-ab compares the scale case (P6)")
    if a.auth_ab and (a.repeat != 1 or a.hogs or a.kill_rank or len(a.concurrency) != 1):
        ap.error("--auth-ab is one interleaved run at one concurrency, without --repeat, "
                 "--hogs or --kill-rank (bench/auth_overhead.py --runs N repeats it)")
    why = hybrid_presets.check(a)
    if why:
        ap.error(why)
    if a.plot and os.path.splitext(a.plot)[1].lower() not in plot.FORMATS:
        ap.error(f"--plot: the file name must end in one of {', '.join(plot.FORMATS)}")
    if a.plot and (a.auth_ab or a.case == "soak"):
        ap.error("--plot draws the rounds of the latency, scale and layerwise cases (the soak "
                 "has none; --auth-ab reports its two clusters' rounds in the JSON)")
    if a.auth_ab_control and not a.auth_ab:
        ap.error("--auth-ab-control goes with --auth-ab")
    if a.case == "soak":
        why = soak.check_fits(a)
        if why:
            ap.error(why)
    return a


def describe(a) -> str:
    topo = (f"model {a.model}, page {a.page}, prefill TP {a.prefill_tp} -> decode TP "
            f"{a.decode_tp}, backend {a.backend}")
    if a.case == "soak":
        return (f"case soak: {topo}, {a.rate} req/s Poisson for {a.minutes} min, sizes 1.."
                f"{a.max_tokens} tokens ({soak.DISTRIBUTION}), seed {a.seed}")
    if a.case == "latency":
        modes = {"warm": f"warm: {a.rounds} rounds (+1 warm-up) of {a.concurrency[-1]} rooms "
                 "sent one at a time", "cold": f"cold: {a.cold_samples} rounds of 1 room"}
        shown = "; ".join(v for k, v in modes.items() if a.latency_mode in (k, "both"))
        return f"case latency: {topo}, {a.tokens} tokens, {shown}, destination pages shuffled"
    return (f"case {a.case}: {topo}, {a.tokens} tokens, concurrency {a.concurrency}, "
            f"{a.rounds} rounds (+1 warm-up), destination pages shuffled")


def measure_baselines(a, bin_dir) -> dict:
    """Baselines measured once, before the hogs start: the engine's P1 and iperf3 are the
    unloaded references the targets name. (P5's ZeroMQ RTT is measured in every run
    instead, under the same conditions as the run, hogs included.)"""
    base = {}
    if a.no_baselines:
        return base
    base["iperf3_gbps"] = baselines.iperf3_gbps()
    if a.case == "scale":
        try:
            base["P1"] = baselines.engine_p1(bin_dir)
        except Exception as e:  # no P1 means no ratio, not a lost run
            base["P1_error"] = f"{type(e).__name__}: {e}"
        topo = baselines.topology_args(a.model, a.concurrency[-1] * a.tokens, a.page,
                                      a.prefill_tp, a.decode_tp)
        try:
            if topo:
                base["engine_at_topology"] = dict(baselines.engine_figure(bin_dir, topo),
                                                  args=" ".join(topo))
        except Exception as e:
            base["engine_at_topology_error"] = f"{type(e).__name__}: {e}"
    return base


def one_run(pdkv, a, base):
    """One run on a fresh cluster -> (its figures, what --plot draws of it or None, the
    Ctrl-C / SIGTERM that cut it short or None). An exception is the run's failure, not
    the bench's: it is logged."""
    log, t_start, stop = failures.FailureLog(), time.monotonic(), None
    modes = latency.modes(a) if a.case == "latency" else {"": a}
    # The headline's rounds (warm unless only cold runs) and, for latency, the cold ones.
    main_mode = next(iter(modes))
    rrs = {m: rounds.new_result(o) for m, o in modes.items()} if a.case != "soak" else {}
    rr = rrs.get(main_mode)
    extra = dict(p1=base.get("P1", {}).get("value"), layer_ms=a.layer_ms,
                 engine_at_topology=base.get("engine_at_topology", {}).get("value"),
                 engine_figure=base.get("engine_at_topology"), rooms=max(a.concurrency),
                 decode_tp=a.decode_tp, soak=None, cold=None)
    try:
        if a.case == "latency":
            latency.run(pdkv, a, modes, rrs, log, extra)
        elif a.case == "soak":
            extra["soak"] = soak.run_soak(pdkv, a, log)
        else:
            for m, o in modes.items():
                rounds.run_rounds(pdkv, o, log, rrs[m])
    except Exception as e:
        traceback.print_exc()
        log.problem("driver", f"bench raised {type(e).__name__}: {e}", time.monotonic())
    except BaseException as e:  # noqa: B036 -- recorded, then re-raised by main()
        log.problem("driver", f"interrupted ({e!r})", time.monotonic())
        stop = e
    for m, r in rrs.items():
        print(report.table(r["rows"], f"pdkv bench e2e --case {a.case}" + (f" ({m})" if m else "")))
    fig = results.run_figures(a.case, rr, log, extra)
    fig["seconds"] = time.monotonic() - t_start
    drawn = None if rr is None else {"rows": rr["rows"], "round_figs": rr["round_figs"],
                                     "sequential": modes[main_mode].sequential}
    return fig, drawn, stop


def print_run(i, n, fig) -> None:
    keys = ("value", "baseline", "ratio", "ratio_to_engine_at_topology", "p99_us", "min_us",
            "lat_p50_us", "lat_p99_us", "rss_growth", "offered_gbps", "achieved_gbps")
    shown = ", ".join(f"{k} {fig[k]:.4g}" for k in keys if isinstance(fig.get(k), float))
    print(f"run {i}/{n}: {shown}; failed rooms {fig['failed_rooms']}, "
          f"verified_bytes_ok {fig['verified_bytes_ok']}")
    if fig.get("cold"):
        c = fig["cold"]
        print("  cold (one room per round, idle between): " + ", ".join(
            f"{k} {c[k]:.4g}" for k in ("value", "p99_us", "min_us", "ratio", "p99_ratio",
                                        "idle_baseline", "ratio_to_idle_rtt",
                                        "p99_ratio_to_idle_rtt") if isinstance(c.get(k), float)))
    for f in fig["first_failures"]:
        rooms = f"{f['count']} rooms (e.g. {f['rooms'][:5]})" if f["count"] else "no room"
        print(f"  {rooms} at {','.join(f['where'])}: {f['reason']}")


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)  # so finally blocks stop the hogs and the ranks


def main():
    argv = sys.argv[1:]
    if "--case=mixed" in argv or any(x == "--case" and y == "mixed" for x, y in zip(argv, argv[1:])):
        import mixed  # P11: its own driver (network namespaces), mixed.py
        return mixed.main(["--case", "mixed"] + [x for x in argv if x not in ("--case=mixed",)
                                                 and x not in ("--case", "mixed")])
    a = parse()
    signal.signal(signal.SIGTERM, _raise_exit)
    import pdkv
    bin_dir = os.environ.get("PDKV_BIN_DIR", os.path.join(os.getcwd(), "build", "bin"))
    print(describe(a))
    if hybrid_presets.is_hybrid(a):
        import hybrid_main
        return hybrid_main.run(pdkv, a, bin_dir)
    if a.auth_ab:
        return run_auth_ab(pdkv, a)
    base, runs, hog_info, interrupted, drawn = {}, [], {"hogs": 0}, None, None
    try:
        base.update(measure_baselines(a, bin_dir))
        with Hogs(a.hogs) as h:
            hog_info = h.describe()
            for i in range(a.repeat):
                fig, drawn, stop = one_run(pdkv, a, base)
                runs.append(fig)
                print_run(i + 1, a.repeat, fig)
                if stop is not None:
                    raise stop
    except BaseException as e:  # Ctrl-C / SIGTERM / a harness bug: still write the JSON
        if isinstance(e, Exception):
            traceback.print_exc()
        interrupted = e
    finally:
        code = finish(a, base, runs, hog_info, interrupted)
        if a.plot:
            draw_plot(a, drawn)
    if isinstance(interrupted, BaseException) and not isinstance(interrupted, Exception):
        raise interrupted
    return code


def run_auth_ab(pdkv, a) -> int:
    """--auth-ab: one interleaved run; prints and writes {"P6_auth": ...}."""
    fig = auth_ab.run(pdkv, a)
    shown = {k: v for k, v in fig.items() if k not in ("on_rounds", "off_rounds")}
    print("P6_auth", shown)
    if a.json:
        report.write_json(a.json, {"P6_auth": fig, "e2e": {"case": a.case, "args": vars(a)}})
    return 0 if fig["verified_bytes_ok"] and fig["ratio"] is not None else 1


def finish(a, base, runs, hog_info, interrupted) -> int:
    """Print, write the JSON, return the exit code (non-zero when anything failed)."""
    key = results.KEYS[a.case]
    agg = results.aggregate(runs, {"hogs": hog_info["hogs"]})
    if a.case == "scale":
        agg.update(requests_per_round=a.concurrency[-1],
                   request_bytes=PRESETS[a.model].bytes_per_token() * a.tokens)
    broken = a.case in ("latency", "soak") and agg.get("negative_samples", 0) > 0
    if a.case in ("latency", "soak"):
        agg["measurement_ok"] = not broken
    if a.case == "latency":
        agg["baseline_what"] = "ZeroMQ PUSH/PULL RTT p50, measured in each run"
    if interrupted is not None:
        agg["interrupted"] = repr(interrupted)
    print(key, {k: v for k, v in agg.items() if k not in ("runs", "first_failures")})
    if agg["runs_with_failures"]:
        print(f"{key}: {agg['runs_with_failures']} of {agg['repeat']} runs had failures "
              f"({agg['failed_rooms']} failed rooms in all)", file=sys.stderr)
    if broken:
        print(f"{key}: THE MEASUREMENT IS BROKEN: {agg['negative_samples']} negative latency "
              f"samples (min {agg.get('min_us')} us); a sample must start before the decode's "
              f"Success", file=sys.stderr)
    last = runs[-1] if runs else {}
    extra = {"case": a.case, "args": vars(a), "rows": last.get("rows", []),
             "baselines": base, "rss_per_round": last.get("rss_per_round", []), **hog_info}
    out = {key: agg, "e2e": extra}
    if a.case == "scale":
        out["P13"] = cpu_cost.aggregate(runs)
        print("P13", {k: v for k, v in out["P13"].items() if k != "runs"})
    if a.json:
        report.write_json(a.json, out)
    ok = bool(runs) and len(runs) == a.repeat and agg["all_succeeded"] and \
        agg["verified_bytes_ok"] and not broken
    return 0 if ok else 1


def draw_plot(a, drawn) -> None:
    """--plot: the last run's figure (plot.py); a run with nothing to draw says why."""
    size = PRESETS[a.model].bytes_per_token() * a.tokens
    size_text = f"{size / 2**20:.3g} MiB" if size >= 2**20 else f"{size / 2**10:.3g} KiB"
    tokens = f"{a.tokens} token" + ("s" if a.tokens != 1 else "")
    title = (f"pdkv bench e2e --case {a.case}: {a.model}, {tokens} ({size_text}) per "
             f"request, prefill TP {a.prefill_tp} -> decode TP {a.decode_tp}, {a.backend}")
    try:
        plot.write(a.plot, drawn["rows"] if drawn else [], drawn["round_figs"] if drawn else [],
                   title, sequential=bool(drawn and drawn["sequential"]))
    except ValueError as e:
        print(f"--plot: {e}; no plot written", file=sys.stderr)
        return
    print(f"plot: {a.plot}")


if __name__ == "__main__":
    sys.exit(main())
