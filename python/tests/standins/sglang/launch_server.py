"""Stand-in for `python -m sglang.launch_server` (test fixture, not upstream code): reports
which manager class sglang's backend selection returns for
--disaggregation-transfer-backend, here and in a child started the way sglang starts its
scheduler processes (multiprocessing spawn, target function in another module)."""
import multiprocessing as mp
import sys

from sglang._standin_scheduler import run_scheduler_process, selected_manager

if __name__ == "__main__":
    from sglang.srt.plugins import load_plugins
    load_plugins()  # upstream's launcher loads plugins before it parses the arguments
    backend = sys.argv[sys.argv.index("--disaggregation-transfer-backend") + 1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=run_scheduler_process, args=(backend, q))
    p.start()
    print(f"main={selected_manager(backend)} scheduler={q.get(timeout=60)}", flush=True)
    p.join(30)
