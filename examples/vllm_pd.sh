#!/usr/bin/env bash
# Disaggregated vLLM over pdkv on one host: a prefill instance, a decode instance, pdkv's
# proxy (which also runs the bootstrap server).
#
# Runs a CPU build of vLLM (VLLM_TARGET_DEVICE=cpu; see vLLM's CPU installation docs),
# whose KV cache lives in host memory. A GPU build's CUDA KV caches work over pdkv's tcp
# backend, which stages device memory through pinned host memory (README "GPU KV
# caches"); shm and ucx refuse device memory.
#
# Needs pdkv importable (PYTHONPATH=build/python after the README build, or the wheel).
# VLLM_CPU_KVCACHE_SPACE (GiB) sizes each instance's KV cache explicitly, and the two
# instances are bound to different cores; on two hosts replace 127.0.0.1 by the hosts'
# addresses, set PDKV_LOCAL_IP and give the proxy --host 0.0.0.0 if clients on other hosts
# must reach it (it listens on loopback otherwise). python/tests/test_engine_examples.py builds
# PdkvConnector from the JSON below.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
BOOTSTRAP=127.0.0.1:8998
CORES=$(nproc)
HALF=$((CORES / 2))

VLLM_CPU_KVCACHE_SPACE=4 VLLM_CPU_OMP_THREADS_BIND="0-$((HALF - 1))" \
vllm serve "$MODEL" --port 8100 \
  --kv-transfer-config '{"kv_connector": "PdkvConnector", "kv_connector_module_path": "pdkv.integrations.vllm", "kv_role": "kv_producer", "kv_connector_extra_config": {"bootstrap_addr": "127.0.0.1:8998", "layerwise": true}}' &

VLLM_CPU_KVCACHE_SPACE=4 VLLM_CPU_OMP_THREADS_BIND="${HALF}-$((CORES - 1))" \
vllm serve "$MODEL" --port 8200 \
  --kv-transfer-config '{"kv_connector": "PdkvConnector", "kv_connector_module_path": "pdkv.integrations.vllm", "kv_role": "kv_consumer", "kv_connector_extra_config": {"bootstrap_addr": "127.0.0.1:8998"}}' &

python3 -m pdkv.integrations.vllm.proxy --port 8000 --serve-bootstrap "${BOOTSTRAP##*:}" \
  --prefill http://127.0.0.1:8100 --decode http://127.0.0.1:8200 &

# once both report ready:
#   curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \
#     -d "{\"model\": \"$MODEL\", \"prompt\": \"The capital of France is\", \"max_tokens\": 16}"
# pdkv's figures are on each instance's /metrics (vllm:pdkv_*).
wait
