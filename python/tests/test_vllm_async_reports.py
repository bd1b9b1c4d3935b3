"""Under vLLM's asynchronous scheduling the scheduler takes a step's output only after
it scheduled the next step, so a client can end a decode request whose load the workers
already reported received. vLLM frees the blocks of a finished request when its load is
reported, and asserts that any later report names a request it still has: the request
must be reported once, in finished_recving, by every worker, or the engine core dies.
Real decode and prefill rank processes; the scheduler's bookkeeping is vllm_engine_model's
SchedulerLedger, which fails the rank on such an assertion."""
import pytest

from engine_replay import use_standins

use_standins()
torch = pytest.importorskip("torch")

from vllm_cluster import run_prefill_then_decode  # noqa: E402

REQUESTS = [("late", 12, 3, None), ("other", 8, 4, None)]


@pytest.mark.parametrize("d_tp", [1, 2])
def test_abort_after_the_load_was_reported_is_not_reported_again(d_tp):
    done, _ = run_prefill_then_decode(
        1, d_tp, "NHD", 4, REQUESTS, chunk=16,
        decode=dict(async_scheduling=True, abort_after_recv="decode-late"))
    for r in range(d_tp):
        report = done[f"d{r}"]
        assert report["aborted"] == ["decode-late"]
        assert report["reports"] == {"decode-late": ["recving"], "decode-other": ["recving"]}
        assert report["freed"] == ["decode-late"] and report["pending_push_work"] is False
        assert report["bytes_ok"] == {"decode-other": True}


def test_abort_mid_load_under_async_scheduling_is_reported_once_as_received():
    # the abort reaches the workers before the load ends: the room fails, the prefill
    # stops, and the request is reported once when its room ended
    done, _ = run_prefill_then_decode(
        1, 1, "NHD", 4, [("slow", 12, 3, None)], chunk=16,
        decode=dict(async_scheduling=True, abort_at_go="decode-slow"))
    report = done["d0"]
    assert report["reports"] == {"decode-slow": ["recving"]}
    assert report["load_errors"] == [] and report["freed"] == ["decode-slow"]
