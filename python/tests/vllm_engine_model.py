"""The parts of vLLM's engine the connector's replays must behave like, written from the
upstream sources pinned in standins/upstream_signatures.json (no engine code copied):

* ``model_runner_step``: one worker step in the order of the model runner's KV-connector
  mixin (kv_connector_model_runner_mixin.py): bind the metadata; start_load_kv before the
  forward only when a load is synchronous, else after it (pdkv's loads are asynchronous);
  the forward (per layer: wait_for_layer_load, the KV write, save_kv_layer); wait_for_save;
  get_transfer_results(finished_req_ids); get_block_ids_with_load_errors; clear.
* ``SchedulerLedger``: what the scheduler does with each step's KVConnectorOutput
  (scheduler.py, _update_from_kv_xfer_finished): a request in finished_recving that is
  still waiting for its KV becomes schedulable, one that already finished has its held
  blocks freed; a request in finished_sending has its blocks freed; either must still
  exist, or the engine core dies on the assertion. A request whose request_finished did
  not delay the free is gone at once.
"""
from __future__ import annotations

import pickle


def model_runner_step(worker, meta, on_layer=None, finished=frozenset(),
                      sync_loads: bool = False):
    """One engine step on the worker side; returns (finished_sending, finished_recving,
    invalid_block_ids) as the model runner puts them in the KVConnectorOutput."""
    worker.bind_connector_metadata(pickle.loads(pickle.dumps(meta)))
    if sync_loads:
        worker.start_load_kv(None)
    for layer, name in enumerate(worker._worker.layer_names):
        worker.wait_for_layer_load(name)
        if on_layer is not None:
            on_layer(layer, name)
        worker.save_kv_layer(name, None, None)
    if not sync_loads:
        worker.start_load_kv(None)
    worker.wait_for_save()
    results = worker.get_transfer_results(set(finished))
    invalid = worker.get_block_ids_with_load_errors()
    worker.clear_connector_metadata()
    return (set(results.finished_sending) or None, set(results.finished_recving) or None,
            invalid)


class SchedulerLedger:
    """The scheduler's request table as the connector's reports change it."""

    def __init__(self, connector):
        self.connector = connector
        self.requests: dict = {}  # req id -> Request, until its blocks are freed
        self.freed: list[str] = []
        self.ready: set[str] = set()  # loads reported received while still waiting

    def add(self, request) -> None:
        self.requests[request.request_id] = request

    def finish(self, request, status, block_ids) -> tuple[bool, object]:
        """The request ends (stop, length cap, client abort): request_finished, and the
        blocks are freed now unless the connector delays it."""
        request.status = status
        delay, params = self.connector.request_finished(request, block_ids)
        if not delay:
            self._free(request.request_id)
        return delay, params

    def apply(self, output) -> None:
        from vllm.v1.request import RequestStatus
        self.connector.update_connector_output(output)
        for req_id in output.finished_recving or ():
            assert req_id in self.requests, f"finished_recving names unknown {req_id}"
            request = self.requests[req_id]
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.ready.add(req_id)
            else:
                assert RequestStatus.is_finished(request.status), request.status
                self._free(req_id)
        for req_id in output.finished_sending or ():
            assert req_id in self.requests, f"finished_sending names unknown {req_id}"
            self._free(req_id)

    def _free(self, req_id: str) -> None:
        del self.requests[req_id]
        self.freed.append(req_id)
