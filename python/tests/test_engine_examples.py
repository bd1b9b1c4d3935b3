"""The engine examples' command lines are the ones the adapters accept: the
--kv-transfer-config JSON of examples/vllm_pd.sh builds PdkvConnector through vLLM's
module-path factory rule, and examples/sglang_pd.sh launches pdkv's sglang wrapper with
the backend name it takes over. Both say up front that they need a host-memory KV cache
and run configurations that have one (vLLM's CPU build, sglang's --device cpu)."""
import importlib
import json
import os
import re
import shlex

from engine_replay import use_standins

use_standins()
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _read(name):
    with open(os.path.join(EXAMPLES, name)) as f:
        return f.read()


def test_vllm_example_configs_build_the_connector():
    from vllm.config import KVTransferConfig, ModelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    text = _read("vllm_pd.sh")
    head = text.split("set -euo pipefail")[0]
    assert "VLLM_TARGET_DEVICE=cpu" in head and "GPU KV" in head
    assert "CUDA_VISIBLE_DEVICES" not in text  # no GPU instances
    assert text.count("VLLM_CPU_KVCACHE_SPACE=") == 2
    configs = [json.loads(m) for m in re.findall(r"--kv-transfer-config '([^']*)'", text)]
    assert [c["kv_role"] for c in configs] == ["kv_producer", "kv_consumer"]
    for c in configs:
        ktc = KVTransferConfig(**c)
        # vLLM's factory: import kv_connector_module_path, take attribute kv_connector.
        cls = getattr(importlib.import_module(ktc.kv_connector_module_path), ktc.kv_connector)
        conn = cls(VllmConfig(kv_transfer_config=ktc, model_config=ModelConfig(8)),
                   KVConnectorRole.SCHEDULER, None)
        assert conn._settings.bootstrap_addr == "127.0.0.1:8998"


def test_sglang_example_uses_the_wrapper_and_the_taken_over_backend():
    from pdkv.integrations.sglang.install import takeover_name
    text = _read("sglang_pd.sh")
    launches = [shlex.split(line.rstrip("\\&"))
                for line in text.replace("\\\n", " ").splitlines()
                if "pdkv.integrations.sglang.launch_server" in line]
    assert "--device cpu" in text.split("set -euo pipefail")[0]
    assert len(launches) == 2
    for argv in launches:
        assert argv[argv.index("--disaggregation-transfer-backend") + 1] == takeover_name()
        assert argv[argv.index("--device") + 1] == "cpu"
        assert "--base-gpu-id" not in argv
    assert takeover_name() == "nixl"
    importlib.import_module("pdkv.integrations.sglang.launch_server".rsplit(".", 1)[0])
