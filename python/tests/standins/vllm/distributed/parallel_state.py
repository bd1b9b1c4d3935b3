"""Stand-in for vllm.distributed.parallel_state: this process's TP rank and size, set by
the replay driver (upstream reads them from the initialised process groups)."""
_TP = {"rank": 0, "size": 1}


def set_tensor_model_parallel(rank: int, size: int) -> None:  # stand-in only
    _TP.update(rank=rank, size=size)


def get_tensor_model_parallel_rank() -> int:
    return _TP["rank"]


def get_tensor_model_parallel_world_size() -> int:
    return _TP["size"]
