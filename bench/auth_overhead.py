#!/usr/bin/env python3
"""Authentication on vs off, interleaved (issue 15: "P1 and P6 within 3 %").

Runs `pdkv bench engine` (P1) and `pdkv bench e2e --case scale` (P6) alternately without
and with a cluster secret, `--pairs` times each, and reports every pair and the median of
the on/off ratios. Interleaving puts both arms in the same minutes of this shared, noisy
machine; the median of several pairs is what is compared with the target.

    PYTHONPATH=build/python /usr/bin/python3 bench/auth_overhead.py --pairs 3 --json auth.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(cmd, env, out):
    subprocess.run(cmd + ["--json", out], env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/bin/pdkv")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--skip-p6", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pdkv-auth-ab-")
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(secret, 0o600)
    off_env = dict(os.environ, PDKV_SECRET_FILE="", PDKV_LOG_LEVEL="error")
    on_env = dict(off_env, PDKV_SECRET_FILE=secret)
    cases = [("P1", [args.bin, "bench", "engine"])]
    if not args.skip_p6:
        cases.append(("P6", [args.bin, "bench", "e2e", "--case", "scale"]))
    report = {}
    for name, cmd in cases:
        pairs = []
        for i in range(args.pairs):
            # Alternate which arm goes first, so a drift in load favours neither.
            order = [("off", off_env), ("on", on_env)] if i % 2 == 0 else \
                    [("on", on_env), ("off", off_env)]
            got = {}
            for arm, env in order:
                res = run(cmd, env, os.path.join(tmp, f"{name}-{arm}-{i}.json")).get(name)
                if not res or res.get("value") is None:
                    sys.exit(f"{name} {arm}: no figure in the benchmark's JSON: {res}")
                got[arm] = res["value"]
                # The figure over its same-run baseline (iperf3 for P1, P1 for P6): cancels
                # a change of machine speed between the two arms.
                got[arm + "_vs_baseline"] = res.get("ratio")
                got[arm + "_verified"] = res.get("verified_bytes_ok")
            got["ratio"] = got["on"] / got["off"]
            if got["on_vs_baseline"] and got["off_vs_baseline"]:
                got["ratio_vs_baseline"] = got["on_vs_baseline"] / got["off_vs_baseline"]
            pairs.append(got)
            print(f"{name} pair {i + 1}: off {got['off']:.3f} on {got['on']:.3f} GB/s, on/off "
                  f"{got['ratio']:.3f}; over same-run baselines {got.get('ratio_vs_baseline')}; "
                  f"bytes verified {got['off_verified']}/{got['on_verified']}", flush=True)
        med = statistics.median(p["ratio"] for p in pairs)
        med_b = statistics.median(p.get("ratio_vs_baseline") or p["ratio"] for p in pairs)
        print(f"{name}: median on/off {med:.3f}, of baseline-normalised figures {med_b:.3f}, "
              f"over {len(pairs)} pairs")
        report[name] = {"pairs": pairs, "median_on_off": med, "median_on_off_vs_baseline": med_b}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
