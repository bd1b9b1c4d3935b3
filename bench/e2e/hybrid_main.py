"""`pdkv bench e2e --case scale --model qwen3-next|gpt-oss|deepseek-v32` (P12 end to end):
the scale case with hybrid rooms through pdkv's managers (hybrid_presets.py for what
moves, hybrid_rounds.py for a run), --repeat runs each on fresh rank processes, --hogs
beside them, and the JSON under key P12 written whatever happens."""
from __future__ import annotations

import sys
import traceback

from pdkv.testing.hogs import Hogs

import baselines
import hybrid_rounds
import report
import results

KEY = "P12"
TARGET = 0.9
# Medians over the runs beside results.MEDIAN's.
MEDIAN = ("ratio_to_plain", "pair_ratio_median", "plain_lat_p50_us", "plain_lat_p99_us",
          "req_per_s")


def describe_groups(a) -> list:
    """What one room moves per group (for the JSON and the log)."""
    hybrid, plain = hybrid_rounds.presets(a)
    out = []
    for arm, preset in (("hybrid", hybrid), ("plain", plain)):
        for g in preset.groups:
            out.append({"arm": arm, "group": g.name, "kind": g.kind.value, "buffers": g.buffers,
                        "items_per_room": g.pages_moved(a.tokens, a.page),
                        "bytes_per_room": g.room_bytes(a.tokens, a.page) *
                        (1 if g.sliced else a.decode_tp), "sliced_by_tp": g.sliced,
                        "window_tokens": g.window_tokens or None})
    return out


def run(pdkv, a, bin_dir: str) -> int:
    hybrid, plain = hybrid_rounds.presets(a)
    room_bytes = hybrid.decode_room_bytes(a.tokens, a.page, a.decode_tp)
    plain_bytes = plain.decode_room_bytes(a.tokens, a.page, a.decode_tp)
    groups = describe_groups(a)
    for g in groups:
        print(f"  {g['arm']:>6} {g['group']:>9}: {g['buffers']} buffers x "
              f"{g['items_per_room']} {'slot' if g['kind'] == 'slots' else 'page'}(s), "
              f"{g['bytes_per_room']} bytes per room on the decodes")
    print(f"  room: hybrid {room_bytes} bytes, plain {plain_bytes} bytes "
          f"({plain_bytes / room_bytes:.3f} x)")
    base, runs, hog_info, interrupted = {}, [], {"hogs": 0}, None
    try:
        if not a.no_baselines:
            base["iperf3_gbps"] = baselines.iperf3_gbps()
            try:
                base["P1"] = baselines.engine_p1(bin_dir)
            except Exception as e:  # no P1 means no ratio to it, not a lost run
                base["P1_error"] = f"{type(e).__name__}: {e}"
        with Hogs(a.hogs) as h:
            hog_info = h.describe()
            for i in range(a.repeat):
                fig = hybrid_rounds.one_run(pdkv, a)
                runs.append(fig)
                print(f"run {i + 1}/{a.repeat}: hybrid {fig['value']} GB/s, plain "
                      f"{fig['baseline']} GB/s, ratio_to_plain {fig['ratio_to_plain']}, "
                      f"failed rooms {fig['failed_rooms']}, verified_bytes_ok "
                      f"{fig['verified_bytes_ok']}")
    except BaseException as e:  # Ctrl-C / SIGTERM / a harness bug: still write the JSON
        if isinstance(e, Exception):
            traceback.print_exc()
        interrupted = e
    finally:
        code = finish(a, base, runs, hog_info, interrupted,
                      dict(groups=groups, request_bytes=room_bytes,
                           plain_request_bytes=plain_bytes))
    if interrupted is not None and not isinstance(interrupted, Exception):
        raise interrupted
    return code


def finish(a, base, runs, hog_info, interrupted, what) -> int:
    agg = results.aggregate(runs, {"hogs": hog_info["hogs"]})
    for k in MEDIAN:
        agg[k] = report.med([r.get(k) for r in runs])
    p1 = base.get("P1", {}).get("value")
    agg.update(what, model=a.model, tokens=a.tokens, page=a.page,
               requests_per_round=a.concurrency[-1], target_ratio=TARGET,
               ratio_to_p1=agg["value"] / p1 if agg.get("value") is not None and p1 else None,
               plain_heads=a.plain_heads,
               baseline_kind="the same bytes per room as plain KV rooms (--plain-heads llama: "
                             "8 KV heads x 128 x bf16; model: the preset's first KV group's "
                             "heads; K and V per layer) through the same "
                             "rank processes (a second manager per rank), rounds alternated "
                             "ABBA in the same run; ratio = ratio_to_plain = median hybrid "
                             "round GB/s / median plain round GB/s")
    if interrupted is not None:
        agg["interrupted"] = repr(interrupted)
    print(KEY, {k: v for k, v in agg.items() if k not in ("runs", "first_failures", "groups")})
    if agg["runs_with_failures"]:
        print(f"{KEY}: {agg['runs_with_failures']} of {agg['repeat']} runs had failures "
              f"({agg['failed_rooms']} failed rooms in all)", file=sys.stderr)
        for f in agg["first_failures"]:
            print(f"  {f['count']} rooms at {','.join(f['where'])}: {f['reason']}",
                  file=sys.stderr)
    if a.json:
        last = runs[-1] if runs else {}
        report.write_json(a.json, {KEY: agg, "e2e": {
            "case": a.case, "args": vars(a), "rows": last.get("rows", []),
            "plain_rows": last.get("plain_rows", []), "baselines": base,
            "rss_per_round": last.get("rss_per_round", []), **hog_info}})
    ok = bool(runs) and len(runs) == a.repeat and agg["all_succeeded"] and \
        agg["verified_bytes_ok"]
    return 0 if ok else 1
