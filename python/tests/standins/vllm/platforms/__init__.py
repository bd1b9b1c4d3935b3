"""Stand-in for vllm.platforms: ``current_platform.is_cpu()``, which the connector reads
to tell vLLM's CPU cache shape from the GPU one when they coincide. The replay sets
``PDKV_STANDIN_CPU_PLATFORM=1`` to play vLLM on CPU (stand-in only)."""
import os


class _Platform:
    def is_cpu(self) -> bool:
        return os.environ.get("PDKV_STANDIN_CPU_PLATFORM") == "1"


current_platform = _Platform()
