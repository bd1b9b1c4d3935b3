"""Test fixture for the launch_server stand-in: a scheduler process's view of sglang's
start-up (ModelRunner, whose setup branches on the backend name) and backend selection."""


def selected_manager(backend: str) -> str:
    from sglang.srt.disaggregation.utils import KVClassType, TransferBackend, get_kv_class
    try:
        return get_kv_class(TransferBackend(backend), KVClassType.MANAGER).__name__
    except ImportError as e:
        return f"ImportError: {e}"


def start_model_runner(backend: str) -> str:
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs
    try:
        ModelRunner(ServerArgs(disaggregation_mode="prefill",
                               disaggregation_transfer_backend=backend))
    except ImportError as e:
        return f"ModelRunner ImportError: {e}"
    return ""


def run_scheduler_process(backend: str, q) -> None:
    from sglang.srt.plugins import load_plugins
    load_plugins()  # upstream's scheduler process loads plugins first
    q.put(start_model_runner(backend) or selected_manager(backend))
