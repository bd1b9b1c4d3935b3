"""vLLM's dataclasses the connector and the replays use, field for field (names and
order) against the snapshot read from upstream (standins/upstream_signatures.json)."""
import dataclasses
import importlib
import json
import os

import pytest

from engine_replay import STANDINS, use_standins

use_standins()
SNAPSHOT = json.load(open(os.path.join(STANDINS, "upstream_signatures.json")))["vllm"]


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("dotted", sorted(SNAPSHOT["dataclasses"]))
def test_standin_dataclass_has_upstream_fields_in_order(dotted):
    assert [f.name for f in dataclasses.fields(_resolve(dotted))] == \
        SNAPSHOT["dataclasses"][dotted]


def test_request_status_orders_finished_states_after_preempted():
    from vllm.v1.request import RequestStatus
    finished = [s for s in RequestStatus if RequestStatus.is_finished(s)]
    assert [s.name for s in finished] == ["FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED",
                                          "FINISHED_ABORTED", "FINISHED_IGNORED"]
