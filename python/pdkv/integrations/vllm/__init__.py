"""vLLM v1 KV connector over pdkv.

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "PdkvConnector",
        "kv_connector_module_path": "pdkv.integrations.vllm", "kv_role": "kv_producer",
        "kv_connector_extra_config": {"bootstrap_addr": "10.0.0.1:8998"}}'

(``kv_consumer`` on the decode instance), then route requests through
``python -m pdkv.integrations.vllm.proxy``. README "Use with vLLM" has the whole recipe.
``PdkvConnector`` imports vLLM on first use, so the proxy runs without vLLM installed.
"""
__all__ = ["PdkvConnector", "PdkvConnectorStats"]


def __getattr__(name):
    if name == "PdkvConnector":
        from pdkv.integrations.vllm.connector import PdkvConnector
        return PdkvConnector
    if name == "PdkvConnectorStats":
        from pdkv.integrations.vllm.stats import PdkvConnectorStats
        return PdkvConnectorStats
    raise AttributeError(f"module 'pdkv.integrations.vllm' has no attribute {name!r}")
