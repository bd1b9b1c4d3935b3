"""A prefill's launcher process, as sglang runs it, starting its bootstrap server through
sglang's disagg_service (the stand-in of the version with a spawned server child).

    python sglang_spawn_driver.py PORT

It loads sglang's plugins (the launcher does; the spawned child does not), starts the
service for ``--disaggregation-transfer-backend pdkv``, and prints one JSON line: the
child's pid and liveness, what /health and pdkv's /query_dp_ranks answered, and whether
close() ended the child and freed the port; or {"error": ...} when the start failed."""
import json
import socket
import sys
import urllib.request


def _get(url: str, body=None):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as res:
        return res.status, res.read().decode()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def main(port: int) -> None:
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang.srt.managers.disagg_service import start_disagg_service
    from sglang.srt.server_args import ServerArgs
    server_args = ServerArgs(host="127.0.0.1", disaggregation_bootstrap_port=port,
                             disaggregation_mode="prefill",
                             disaggregation_transfer_backend="pdkv")
    try:
        handle = start_disagg_service(server_args)
    except RuntimeError as e:
        print(json.dumps({"error": str(e)}))
        return
    out = {"child_alive": handle.is_alive(), "child_pid": handle.proc.pid}
    out["health"] = _get(f"http://127.0.0.1:{port}/health")[0]
    # pdkv's own bootstrap answers sglang's DP-group query (an empty answer for no room).
    out["query"] = _get(f"http://127.0.0.1:{port}/query_dp_ranks", {"bootstrap_rooms": [7]})
    handle.close()
    handle.proc.join(5)
    out["closed"] = not handle.is_alive()
    out["port_free"] = _port_free(port)
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]))
