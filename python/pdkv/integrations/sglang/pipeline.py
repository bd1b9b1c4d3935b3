"""Pipeline parallelism (``--pp-size``) between sglang instances over pdkv.

A prefill pipeline stage holds the KV of its own layers only (sglang's KVArgs list that
stage's buffers; ``prefill_start_layer`` says where they begin). pdkv treats each stage as
an instance of its own: a stage's ranks register in that stage's table of the bootstrap
server (``pdkv.KVArgs.pp_rank`` / ``pp_size``), and a decode manager of stage s receives
from prefill stage s into the buffers of the same layers. What sglang's own backends
allow, pdkv allows:

- decode ``pp_size`` equal to the prefill's: decode stage s receives from prefill stage s,
  both holding the same layers (one pdkv manager per rank, as without PP);
- decode ``pp_size`` 1: the decode rank receives from every prefill stage, each stage's
  layers landing at that stage's offset in the decode's pool. The rank keeps one pdkv
  manager per prefill stage (each registers the buffers of that stage's layers), created
  when it first meets an instance of that stage split, and a request is Success once every
  stage's room is (``StagedReceiver``).

Any other pair is refused by the decode, as sglang's common backend asserts. The aux row
(the first token and its metadata) comes from the last stage, which samples it, and goes
to the decode's last stage. Hybrid state (Mamba, SWA, DSA pools) is per stage too, but a
decode of one stage holds every layer's state in one pool per kind, which a stage's
buffers do not map onto: state with pp_size > 1 is refused (kvargs.py).
"""
from __future__ import annotations

import copy
from typing import List, Optional, Sequence

import pdkv


def pp_size_of(server_args) -> int:
    return int(getattr(server_args, "pp_size", 1) or 1)


def buffers_per_layer(is_mla: bool) -> int:
    return 1 if is_mla else 2


def stage_layer_counts(stage_kv_buffers: Sequence[int], is_mla: bool) -> List[int]:
    """The KV layers of each prefill stage, from the KV buffers each registered."""
    per = buffers_per_layer(is_mla)
    if any(n % per for n in stage_kv_buffers):
        raise RuntimeError(f"a prefill stage registered {list(stage_kv_buffers)} KV buffers, "
                           f"not a whole number of {per}-buffer layers")
    return [n // per for n in stage_kv_buffers]


def stage_view(args, first_layer: int, layers: int, is_mla: bool, keep_aux: bool):
    """A copy of sglang's KVArgs holding layers [first_layer, first_layer + layers) of its
    KV pool only (K buffers then V buffers, or latents), and the aux buffers only where
    ``keep_aux``: what one stage's pdkv manager registers."""
    view = copy.copy(args)
    ptrs, lens, items = list(args.kv_data_ptrs), list(args.kv_data_lens), list(args.kv_item_lens)
    total = len(ptrs) // buffers_per_layer(is_mla)
    if first_layer + layers > total:
        raise RuntimeError(f"the prefill's stages hold {first_layer + layers} KV layers, this "
                           f"decode {total}: both must serve the same model")
    picked = [first_layer + i for i in range(layers)]
    if not is_mla:
        picked += [total + first_layer + i for i in range(layers)]
    view.kv_data_ptrs = [ptrs[i] for i in picked]
    view.kv_data_lens = [lens[i] for i in picked]
    view.kv_item_lens = [items[i] for i in picked]
    mem_kinds = getattr(args, "kv_data_mem_kinds", None)
    if mem_kinds is not None:
        view.kv_data_mem_kinds = [list(mem_kinds)[i] for i in picked]
    if not keep_aux:
        view.aux_data_ptrs, view.aux_data_lens, view.aux_item_lens = [], [], []
    return view


def without_aux(args):
    view = copy.copy(args)
    view.aux_data_ptrs, view.aux_data_lens, view.aux_item_lens = [], [], []
    return view


class StagedReceiver:
    """One request's pdkv receivers, one per prefill stage, read as one: Failed as soon as
    any stage failed, else the least advanced stage's state (Success once all are)."""

    def __init__(self, managers: Sequence, bootstrap_addr: str, room: int):
        self._receivers = [pdkv.KVReceiver(m, bootstrap_addr, room) for m in managers]
        self._last = len(self._receivers) - 1

    def init(self, prefill_dp_rank: Optional[int] = None) -> None:
        for r in self._receivers:
            r.init(prefill_dp_rank)

    def send_metadata(self, kv_indices, aux_index=None, decode_prefix_len=None,
                      **extra) -> None:
        for s, r in enumerate(self._receivers):
            r.send_metadata(kv_indices, aux_index=aux_index if s == self._last else None,
                            decode_prefix_len=decode_prefix_len, **extra)

    def poll(self):
        states = [int(r.poll()) for r in self._receivers]
        if int(pdkv.KVPoll.Failed) in states:
            return pdkv.KVPoll.Failed
        return pdkv.KVPoll(min(states))  # KVPoll counts up as a room advances

    def failure_exception(self) -> None:
        for r in self._receivers:
            if int(r.poll()) == int(pdkv.KVPoll.Failed):
                r.failure_exception()

    def prefill_metadata(self):
        return self._receivers[self._last].prefill_metadata()

    def clear(self) -> None:
        for r in self._receivers:
            r.clear()

    def abort(self) -> None:
        for r in self._receivers:
            r.abort()
