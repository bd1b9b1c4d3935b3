"""A vLLM-shaped instance behind a real OpenAI-style HTTP endpoint, for the end-to-end
test through pdkv's proxy: HTTP threads hand requests to one engine loop (as vLLM's API
server hands them to its engine core), which drives PdkvConnector in vLLM's call order
(vllm_replay.py) over real CPU KV caches.

Prefill: answers once the prompt's forward finished (max_tokens 1), with the connector's
kv_transfer_params; the push goes on in the engine loop. Decode: answers once the KV
landed, with whether every byte (checked against the pattern the prefill wrote) is right;
a request without remote KV (none offered, or its parameters refused) is answered at once
with "remote_kv": false.
The prompt is a list of token ids; its first id seeds the KV pattern of the request.
"""
from __future__ import annotations

import json
import queue
import threading
import time
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from engine_replay import block_allocator
from pdkv.testing import heads_of
from vllm_engine_model import model_runner_step
from vllm_objects import new_request, scheduler_output
from vllm_replay import NUM_BLOCKS, _connectors, check_kv, make_caches, write_kv


class _Engine:
    def __init__(self, cfg, role: str):
        import torch
        self.torch, self.cfg, self.role = torch, cfg, role
        self.sched, self.worker = _connectors(
            cfg, "kv_producer" if role == "prefill" else "kv_consumer", role + "-instance")
        self.bs = cfg["block_size"]
        self.first_head, self.n_heads = heads_of(cfg["rank"], cfg["tp"], cfg["heads"])
        self.caches = make_caches(torch, cfg["layout"], self.n_heads, self.bs)
        self.worker.register_kv_caches(self.caches)
        self.alloc = block_allocator(5 if role == "prefill" else 9, NUM_BLOCKS)
        self.inbox: queue.Queue = queue.Queue()
        self.live: dict = {}  # req id -> (request, blocks, seed, future)
        self.finished: set[str] = set()
        self.counter = 0

    def submit(self, body: dict) -> Future:
        fut: Future = Future()
        self.inbox.put((body, fut))
        return fut

    def loop(self, stop: threading.Event) -> None:
        from vllm.v1.core.kv_cache_manager import KVCacheBlocks
        from vllm.v1.outputs import KVConnectorOutput
        from vllm.v1.request import Request, RequestStatus
        while not stop.is_set():
            new, scheduled = [], {}
            while not self.inbox.empty():
                body, fut = self.inbox.get()
                self.counter += 1
                req_id = f"cmpl-{self.role}-{self.counter}"  # engine-local ids differ
                prompt = body["prompt"]
                r = Request(req_id, prompt, body.get("kv_transfer_params"))
                n_blocks = -(-len(prompt) // self.bs)
                if self.role == "prefill":
                    blocks = self.alloc(n_blocks)
                    assert self.sched.get_num_new_matched_tokens(r, 0) == (0, False)
                    self.sched.update_state_after_alloc(r, KVCacheBlocks((blocks,)), 0)
                    new.append(new_request(req_id, (blocks,), 0))
                    scheduled[req_id] = len(prompt)  # whole prompt in one step
                else:
                    count, _ = self.sched.get_num_new_matched_tokens(r, 0)
                    blocks = self.alloc(n_blocks)
                    self.sched.update_state_after_alloc(r, KVCacheBlocks((blocks,)), count)
                    if count == 0:
                        # No remote KV (none offered, or the parameters were refused):
                        # vLLM computes the prompt itself; answered at once here.
                        fut.set_result({"choices": [{"text": "computed locally"}],
                                        "remote_kv": False})
                        continue
                self.live[req_id] = (r, blocks, prompt[0], fut)
            meta = self.sched.build_connector_meta(scheduler_output(new, None, scheduled))

            def forward(layer, name):
                for req_id, n in scheduled.items():
                    r, blocks, seed, _ = self.live[req_id]
                    write_kv(self.torch, self.caches[name], self.cfg["layout"], layer, blocks,
                             self.bs, range(n), self.first_head, self.n_heads, seed)

            sending, recving, invalid = model_runner_step(self.worker, meta, forward,
                                                          self.finished)
            self.sched.update_connector_output(KVConnectorOutput(sending, recving))
            for req_id in scheduled:  # prefill: max_tokens=1, done after this forward
                r, blocks, _, fut = self.live[req_id]
                r.num_computed_tokens = r.num_prompt_tokens
                r.status = RequestStatus.FINISHED_LENGTH_CAPPED
                _, params = self.sched.request_finished(r, (blocks,))
                self.finished.add(req_id)
                fut.set_result({"choices": [{"text": "x"}], "kv_transfer_params": params})
            for req_id in sending or ():
                self.finished.discard(req_id)
                self.live.pop(req_id, None)
            for req_id in recving or ():
                r, blocks, seed, fut = self.live.pop(req_id)
                ok = all(check_kv(self.torch, self.caches[name], self.cfg["layout"], layer,
                                  blocks, self.bs, range(r.num_prompt_tokens), self.first_head,
                                  self.n_heads, seed)
                         for layer, name in enumerate(self.caches))
                errors = invalid
                fut.set_result({"choices": [{"text": "decoded"}], "bytes_ok": ok,
                                "load_errors": sorted(errors)})
            time.sleep(0.002)


def serve_main(cfg, out_q, in_q):
    """Rank process: one instance (TP 1) serving HTTP until told to stop."""
    engine = _Engine(cfg, cfg["role"])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            out = engine.submit(body).result(timeout=60)
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop = threading.Event()
    loop = threading.Thread(target=engine.loop, args=(stop,), daemon=True)
    loop.start()
    out_q.put(("url", cfg["name"], f"http://127.0.0.1:{server.server_address[1]}"))
    in_q.get(timeout=300)  # ("stop",)
    stop.set()
    loop.join(10)
    server.shutdown()
    engine.worker.shutdown()
