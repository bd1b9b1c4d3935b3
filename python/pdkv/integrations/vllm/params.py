"""The ``kv_transfer_params`` pdkv's connector reads and writes (the proxy sets the first).

prefill request:  {"do_remote_decode": true, "pdkv_room": <optional int>}
prefill response: {"do_remote_prefill": true, "do_remote_decode": false, "pdkv_room": R,
                   "pdkv_bootstrap_addr": "host:port", "pdkv_num_blocks": N,
                   "pdkv_num_tokens": T, "pdkv_tp_size": TP}
                  (T: prompt tokens whose KV the prefill computed, N-1 for a model with
                  Mamba state; TP: the prefill's tensor-parallel size, when known)
decode request:   the prefill response, unchanged.
"""
DO_REMOTE_DECODE = "do_remote_decode"
DO_REMOTE_PREFILL = "do_remote_prefill"
ROOM = "pdkv_room"
BOOTSTRAP_ADDR = "pdkv_bootstrap_addr"
NUM_BLOCKS = "pdkv_num_blocks"
NUM_TOKENS = "pdkv_num_tokens"
TP_SIZE = "pdkv_tp_size"
