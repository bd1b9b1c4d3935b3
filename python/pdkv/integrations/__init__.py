"""Glue between pdkv and the serving engines people run.

- ``pdkv.integrations.vllm``: ``PdkvConnector``, a vLLM v1 KV connector (load it with
  ``--kv-transfer-config '{"kv_connector": "PdkvConnector",
  "kv_connector_module_path": "pdkv.integrations.vllm", ...}'``) and a small proxy
  (``python -m pdkv.integrations.vllm.proxy``).
- ``pdkv.integrations.sglang``: sglang's four disaggregation classes over pdkv, and
  ``install()`` that makes sglang's backend selection return them.

Neither engine is imported by ``import pdkv``; each sub-package imports its engine on
first use. ``settings`` and ``rooms`` are the engine-independent parts both share.
"""
