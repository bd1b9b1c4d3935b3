"""`pdkv demo`: the tiny transformer run disaggregated (prefill and decode in separate
processes, pdkv moving the KV cache) against the same model run colocated, then a short
transfer-engine benchmark. Exits non-zero if the tokens differ.

Every process runs under a cluster secret the demo makes for itself (cluster_secret.py),
unless PDKV_SECRET_FILE is already set."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from cluster_secret import SECRET_BYTES, demo_secret  # noqa: E402
from disagg import run_disaggregated  # noqa: E402
from tiny_model import TinyModel, colocated_generate  # noqa: E402


def header(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def chunk_size(prompt_len: int, page_size: int) -> int:
    """Page-aligned chunk giving at least 3 chunks (a chunk sends the pages it completed)."""
    return max(page_size, (prompt_len // 3) // page_size * page_size)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="pdkv demo", description=__doc__,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--tp-decode", type=int, choices=(1, 2), default=1,
                    help="decode processes (tensor parallel size), each receiving its KV heads")
    ap.add_argument("--chunked", action="store_true", help="chunked prefill, 3+ chunks")
    ap.add_argument("--tokens", type=int, default=16, help="tokens to generate")
    ap.add_argument("--prompt-len", type=int, default=40, help="prompt tokens")
    ap.add_argument("--page", type=int, default=4, help="page size in tokens")
    ap.add_argument("--seed", type=int, default=0, help="prompt seed")
    ap.add_argument("--no-bench", action="store_true", help="skip the engine benchmark")
    args = ap.parse_args(argv)
    if args.prompt_len < 1 or args.tokens < 1 or args.page < 1:
        ap.error("--prompt-len, --tokens and --page must be positive")
    if args.prompt_len + args.tokens > TinyModel().cfg.max_positions:
        ap.error(f"--prompt-len + --tokens must be <= {TinyModel().cfg.max_positions}")

    # SIGTERM ends the demo through its finally blocks, so the secret's directory goes too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with demo_secret() as (secret_path, made):
        if made:
            print(f"cluster secret: made one for this demo ({SECRET_BYTES} random bytes from "
                  f"the OS, mode 600, {secret_path}, removed at exit); the bootstrap server "
                  "and every process get it through PDKV_SECRET_FILE", flush=True)
        else:
            print(f"cluster secret: PDKV_SECRET_FILE from the environment ({secret_path})",
                  flush=True)
        return run(args)


def run(args) -> int:
    prompt = np.random.default_rng(args.seed).integers(0, 256, args.prompt_len)
    chunk = chunk_size(args.prompt_len, args.page) if args.chunked else None

    header("1. colocated reference (one process, no pdkv)")
    expected = colocated_generate(TinyModel(), prompt, args.tokens, args.page)
    print(f"tokens: {expected}")

    header(f"2. disaggregated: prefill TP 1 -> decode TP {args.tp_decode} over pdkv (tcp)")
    print(f"prompt {args.prompt_len} tokens, page {args.page}, "
          f"{'chunked prefill, chunk ' + str(chunk) if chunk else 'whole-prompt prefill'}")
    if args.tp_decode == 2:
        print("decode TP 2: two decode processes each receive their KV-head slice; the "
              "coordinator gathers both slices and generates")
    t0 = time.monotonic()
    run = run_disaggregated(prompt, args.tokens, args.page, args.tp_decode, chunk)
    print(f"prefill sent {run['prefill']['pages']} pages in {run['prefill']['chunks']} chunk(s);"
          f" bootstrap server + {1 + args.tp_decode} processes, {time.monotonic() - t0:.1f} s")
    for d in run["decode"]:
        print(f"decode rank {d['rank']}: received into pages {d['pages'][:8]}..., "
              f"first token {d['first']} (prefill metadata)")
    print(f"tokens: {run['tokens']}")

    header("3. check")
    if run["tokens"] != expected:
        print("MISMATCH: disaggregated tokens differ from the colocated ones")
        return 1
    print(f"OK: disaggregated == colocated ({len(expected)} tokens)")

    if not args.no_bench:
        header("4. transfer engine benchmark (pdkv bench engine, tcp, llama3-8b, 1024 tokens)")
        bin_dir = os.environ.get("PDKV_BIN_DIR", "build/bin")  # the pdkv CLI sets it
        cmd = [os.path.join(bin_dir, "pdkv"), "bench", "engine", "--backend", "tcp", "--model",
               "llama3-8b", "--tokens", "1024", "--page", "16", "--rounds", "3",
               "--iperf-seconds", "1"]
        print("$ " + " ".join(cmd), flush=True)
        rc = subprocess.run(cmd, timeout=90).returncode
        if rc != 0:
            print(f"benchmark exited with {rc}")
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
