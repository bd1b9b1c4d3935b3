"""The scheduler's per-step objects as vLLM's Scheduler.schedule() fills them, for the
replays and unit tests (the stand-ins take every upstream field; these name the ones the
connector reads and give the rest the values vLLM's scheduler gives them)."""
from __future__ import annotations


def new_request(req_id: str, block_ids, num_computed_tokens: int = 0, prompt=None):
    from vllm.v1.core.sched.output import NewRequestData
    return NewRequestData(req_id, prompt, [], None, None, tuple(block_ids),
                          num_computed_tokens, None)


def cached_requests(req_ids=(), new_block_ids=(), num_computed_tokens=(), resumed=()):
    """Requests scheduled before; for those in ``resumed`` (back from a preemption)
    new_block_ids are all their blocks."""
    from vllm.v1.core.sched.output import CachedRequestData
    req_ids = list(req_ids)
    return CachedRequestData(req_ids, set(resumed), [], {}, list(new_block_ids),
                             list(num_computed_tokens), [0] * len(req_ids))


def scheduler_output(new=(), cached=None, scheduled=None, finished=(), preempted=None):
    """``preempted``: upstream fills preempted_req_ids (a set, maybe empty) at the
    commits pinned; None plays a vLLM that leaves it unset."""
    from vllm.v1.core.sched.output import CachedRequestData, SchedulerOutput
    scheduled = dict(scheduled or {})
    return SchedulerOutput(list(new), cached or CachedRequestData.make_empty(), scheduled,
                           sum(scheduled.values()), {}, {}, [], set(finished), [],
                           preempted_req_ids=preempted)
