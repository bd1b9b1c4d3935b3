"""`pdkv demo`: tiny models run disaggregated (prefill and decode in separate processes,
pdkv moving the KV cache) against the same model run colocated, then a short
transfer-engine benchmark. With no run-selecting flag (--model, --tp-decode, --chunked)
it runs each hand-over in turn: the dense transformer TP 1 -> 1 with the whole prompt,
TP 1 -> 2 with head slicing and a chunked prompt, and the hybrid model (attention KV
pages plus recurrent state slots) with a chunked prompt; a flag runs just the run it
names. Exits non-zero if any run's tokens differ.

Every process runs under a cluster secret the demo makes for itself (cluster_secret.py),
unless PDKV_SECRET_FILE is already set."""
from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from cluster_secret import SECRET_BYTES, demo_secret  # noqa: E402
from disagg import run_disaggregated  # noqa: E402
from disagg_hybrid import DECODE_SLOT, PREFILL_SLOT, run_hybrid_disaggregated  # noqa: E402
from hybrid_model import HybridModel, hybrid_colocated_generate  # noqa: E402
from tiny_model import TinyModel, colocated_generate  # noqa: E402


def header(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def chunk_size(prompt_len: int, page_size: int) -> int:
    """Page-aligned chunk giving at least 3 chunks (a chunk sends the pages it completed)."""
    return max(page_size, (prompt_len // 3) // page_size * page_size)


@dataclasses.dataclass(frozen=True)
class Run:
    model: str      # "dense" (tiny_model.py) or "hybrid" (hybrid_model.py)
    tp_decode: int
    chunked: bool

    def title(self) -> str:
        what = ("dense transformer" if self.model == "dense"
                else "hybrid model (attention KV + recurrent state)")
        return (f"{what}, prefill TP 1 -> decode TP {self.tp_decode}, "
                f"{'chunked' if self.chunked else 'whole-prompt'} prefill")


# What a plain `pdkv demo` runs (the README's description): every hand-over the demo knows.
DEFAULT_RUNS = (Run("dense", 1, False), Run("dense", 2, True), Run("hybrid", 1, True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="pdkv demo", description=__doc__,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", choices=("dense", "hybrid"),
                    help="run only this model (hybrid: attention layers + recurrent state "
                         "layers, decode TP 1); default: every run, see the description")
    ap.add_argument("--tp-decode", type=int, choices=(1, 2),
                    help="run only this decode TP size (processes, each receiving its KV "
                         "heads)")
    ap.add_argument("--chunked", action="store_true",
                    help="run only chunked prefill (3+ chunks)")
    ap.add_argument("--tokens", type=int, default=16, help="tokens to generate")
    ap.add_argument("--prompt-len", type=int, default=40, help="prompt tokens")
    ap.add_argument("--page", type=int, default=4, help="page size in tokens")
    ap.add_argument("--seed", type=int, default=0, help="prompt seed")
    ap.add_argument("--no-bench", action="store_true", help="skip the engine benchmark")
    # Tests only: the hybrid prefill keeps its recurrent state, proving the check sees it.
    ap.add_argument("--drop-state-for-test", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.prompt_len < 1 or args.tokens < 1 or args.page < 1:
        ap.error("--prompt-len, --tokens and --page must be positive")
    if args.prompt_len + args.tokens > TinyModel().cfg.max_positions:
        ap.error(f"--prompt-len + --tokens must be <= {TinyModel().cfg.max_positions}")
    if args.model == "hybrid" and args.tp_decode == 2:
        ap.error("--model hybrid runs decode TP 1 only (its state slots move whole)")
    runs = select_runs(args)

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
        return run_all(args, runs)


def select_runs(args) -> list[Run]:
    """No run-selecting flag: every default run. Any of them: the one run they name, the
    others at their default (dense, TP 1, whole prompt)."""
    if args.model is None and args.tp_decode is None and not args.chunked:
        return list(DEFAULT_RUNS)
    return [Run(args.model or "dense", args.tp_decode or 1, args.chunked)]


def run_all(args, runs: list[Run]) -> int:
    prompt = np.random.default_rng(args.seed).integers(0, 256, args.prompt_len)
    failed = []
    for i, r in enumerate(runs, 1):
        header(f"run {i}/{len(runs)}: {r.title()}")
        if not run_one(args, r, prompt):
            failed.append(i)
    if failed:
        print(f"\n{len(failed)} of {len(runs)} run(s) MISMATCHED: {failed}")
        return 1
    if not args.no_bench:
        header("transfer engine benchmark (pdkv bench engine, tcp, llama3-8b, 1024 tokens)")
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


def run_one(args, r: Run, prompt: np.ndarray) -> bool:
    """One disaggregated run against its colocated reference; True when the tokens match."""
    chunk = chunk_size(args.prompt_len, args.page) if r.chunked else None
    if r.model == "dense":
        expected = colocated_generate(TinyModel(), prompt, args.tokens, args.page)
    else:
        expected = hybrid_colocated_generate(HybridModel(), prompt, args.tokens, args.page)
    print(f"colocated reference (one process, no pdkv): {expected}")
    print(f"prompt {args.prompt_len} tokens, page {args.page}, "
          f"{'chunk ' + str(chunk) if chunk else 'one chunk'}")
    if r.tp_decode == 2:
        print("decode TP 2: two decode processes each receive their KV-head slice; the "
              "coordinator gathers both slices and generates")
    t0 = time.monotonic()
    if r.model == "dense":
        got = run_disaggregated(prompt, args.tokens, args.page, r.tp_decode, chunk)
    else:
        got = run_hybrid_disaggregated(prompt, args.tokens, args.page, chunk,
                                       send_state=not args.drop_state_for_test)
    print(f"prefill sent {got['prefill']['pages']} pages in {got['prefill']['chunks']} "
          f"chunk(s); bootstrap server + {1 + r.tp_decode} processes, "
          f"{time.monotonic() - t0:.1f} s")
    if r.model == "hybrid":
        print(f"state: {got['prefill']['state_bytes']} bytes of slot {PREFILL_SLOT} (conv "
              f"window + recurrence of each recurrent layer) with the last chunk -> decode "
              f"slot {DECODE_SLOT}")
    for d in got["decode"]:
        print(f"decode rank {d['rank']}: received into pages {d['pages'][:8]}..., "
              f"first token {d['first']} (prefill metadata)")
    print(f"tokens: {got['tokens']}")
    if got["tokens"] != expected:
        print("MISMATCH: disaggregated tokens differ from the colocated ones")
        return False
    print(f"OK: disaggregated == colocated ({len(expected)} tokens)")
    return True


if __name__ == "__main__":
    sys.exit(main())
