"""Test fixture for the launch_server stand-in: a scheduler process's view of sglang's
backend selection."""


def selected_manager(backend: str) -> str:
    from sglang.srt.disaggregation.utils import KVClassType, TransferBackend, get_kv_class
    try:
        return get_kv_class(TransferBackend(backend), KVClassType.MANAGER).__name__
    except ImportError as e:
        return f"ImportError: {e}"


def run_scheduler_process(backend: str, q) -> None:
    q.put(selected_manager(backend))
