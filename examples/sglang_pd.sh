#!/usr/bin/env bash
# Disaggregated sglang over pdkv on one host.
#
# Runs sglang's CPU backend (--device cpu), whose KV pools live in host memory. GPU pools
# (--device cuda) work over pdkv's tcp backend, which stages device memory through pinned
# host memory (README "GPU KV caches"); shm and ucx refuse device memory.
#
# sglang has no module-path factory, so pdkv takes over one existing backend name,
# "nixl" by default (PDKV_SGLANG_TAKEOVER changes it; README "Use with sglang" says why
# not mooncake, ascend or fake): launch through pdkv's wrapper of sglang.launch_server,
# which installs the hook in every sglang process. Needs sglang (CPU build) and
# sglang-router installed, pdkv importable.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}

python3 -m pdkv.integrations.sglang.launch_server --model-path "$MODEL" --device cpu \
  --port 30000 --disaggregation-mode prefill --disaggregation-transfer-backend nixl \
  --disaggregation-bootstrap-port 8998 &

python3 -m pdkv.integrations.sglang.launch_server --model-path "$MODEL" --device cpu \
  --port 30001 --disaggregation-mode decode --disaggregation-transfer-backend nixl &

python3 -m sglang_router.launch_router --pd-disaggregation \
  --prefill http://127.0.0.1:30000 8998 --decode http://127.0.0.1:30001 --port 8000 &

# once all report ready:
#   curl -s localhost:8000/generate -H 'Content-Type: application/json' \
#     -d '{"text": "The capital of France is", "sampling_params": {"max_new_tokens": 16}}'
wait
