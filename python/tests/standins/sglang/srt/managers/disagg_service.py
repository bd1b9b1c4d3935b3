"""Stand-in for sglang/srt/managers/disagg_service.py in the version that runs the prefill's
bootstrap server in a dedicated child process.

start_disagg_service(server_args): on a prefill, spawns (multiprocessing "spawn" context)
a child that resolves the backend itself (TransferBackend(name), then
get_kv_class(backend, BOOTSTRAP_SERVER)) without ever calling load_plugins(), builds the
server with host= and port=, and, while it polls its own /health, fails if
``server.thread.is_alive()`` turns False; it reports {"status": "ready"} or
{"status": "error", "message"} over a pipe, then blocks in ``server.thread.join()``.
The parent waits for that report and raises RuntimeError with the child's message. With
SGLANG_DISABLE_BOOTSTRAP_SERVER_SUBPROCESS set, the server is built in this process.
Returns a handle with is_alive() / close() (terminate, join 2 s, kill)."""
import multiprocessing as mp
import os
import sys
import time
import urllib.request

from sglang.srt.disaggregation.utils import (DisaggregationMode, KVClassType, TransferBackend,
                                             get_kv_class)

_CHILD_HEALTH_TIMEOUT_S = 25.0
_PARENT_READY_TIMEOUT_S = 60.0


class BootstrapServerProcHandle:
    def __init__(self, proc):
        self.proc = proc

    def is_alive(self) -> bool:
        return self.proc.is_alive()

    def close(self):
        if not self.proc.is_alive():
            return
        self.proc.terminate()
        self.proc.join(timeout=2)
        if self.proc.is_alive():
            self.proc.kill()


def _health_url(server_args) -> str:
    host = server_args.host if server_args.host not in ("0.0.0.0", "") else "127.0.0.1"
    return f"http://{host}:{server_args.disaggregation_bootstrap_port}/health"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as res:
            return res.status == 200
    except OSError:
        return False


def _run_bootstrap_server_process(server_args, ready_writer):
    try:
        backend = TransferBackend(server_args.disaggregation_transfer_backend)
        server = get_kv_class(backend, KVClassType.BOOTSTRAP_SERVER)(
            host=server_args.host, port=server_args.disaggregation_bootstrap_port)
        deadline = time.monotonic() + _CHILD_HEALTH_TIMEOUT_S
        while True:
            if not server.thread.is_alive():
                raise RuntimeError("bootstrap server thread exited during startup")
            if _healthy(_health_url(server_args)):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("bootstrap server did not answer /health")
            time.sleep(0.05)
    except Exception as e:  # noqa: BLE001 - reported to the parent, as upstream does
        ready_writer.send({"status": "error", "message": f"{type(e).__name__}: {e}"})
        ready_writer.close()
        sys.exit(1)
    ready_writer.send({"status": "ready"})
    ready_writer.close()
    server.thread.join()


def _start_bootstrap_server_subprocess(server_args) -> BootstrapServerProcHandle:
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_run_bootstrap_server_process, args=(server_args, writer),
                       name="disagg_bootstrap_server", daemon=True)
    proc.start()
    writer.close()
    handle = BootstrapServerProcHandle(proc)
    msg, deadline = None, time.monotonic() + _PARENT_READY_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if reader.poll(0.1):
                try:
                    msg = reader.recv()
                except EOFError:
                    pass
                break
            if not proc.is_alive():
                break
    finally:
        reader.close()
    if msg is None or msg.get("status") != "ready":
        handle.close()
        reason = msg.get("message", str(msg)) if msg else f"exit code {proc.exitcode}"
        raise RuntimeError(f"PD bootstrap server failed to start: {reason}")
    return handle


def start_disagg_service(server_args):
    mode = DisaggregationMode(server_args.disaggregation_mode)
    backend = TransferBackend(server_args.disaggregation_transfer_backend)
    if mode != DisaggregationMode.PREFILL:
        return None
    if os.environ.get("SGLANG_DISABLE_BOOTSTRAP_SERVER_SUBPROCESS"):
        return get_kv_class(backend, KVClassType.BOOTSTRAP_SERVER)(
            host=server_args.host, port=server_args.disaggregation_bootstrap_port)
    return _start_bootstrap_server_subprocess(server_args)
