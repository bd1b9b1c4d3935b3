"""An MHA/GQA rank's KV head counts, given by sglang's KVArgs or derived from the model.

sglang's prefill sets ``KVArgs.kv_head_num`` (this rank's heads) and
``total_kv_head_num`` (the model's); its decode sets them only with its staging-buffer
option, so for the decode they are derived here the way sglang sizes its MHA pool: the
model's KV head count from sglang's own ``ModelConfig`` (the same HF config the pool was
built from), and per rank ``max(1, total // attention TP size)`` (heads are replicated
when there are fewer than ranks). The buffers' item lengths must then hold a whole number
of heads per token; if they do not, or the model cannot be read, the decode refuses to
start with the reason rather than move wrongly sliced heads.
"""
from __future__ import annotations


def _given(args, name: str):
    value = getattr(args, name, None)
    return None if value is None else int(value)


def model_total_kv_heads(server_args) -> int:
    """The model's KV head count as sglang computes it (ValueError with the reason)."""
    try:
        from sglang.srt.configs.model_config import ModelConfig
        config = ModelConfig.from_server_args(
            server_args, model_path=server_args.model_path,
            model_revision=getattr(server_args, "revision", None))
        return int(config.get_total_num_kv_heads())
    except Exception as e:  # noqa: BLE001 - any reason the model cannot be read is reported
        raise ValueError(
            "sglang's KVArgs carry no kv_head_num (its decode sets it only with "
            "SGLANG_DISAGG_STAGING_BUFFER) and pdkv could not read the model's KV head count "
            f"from {getattr(server_args, 'model_path', None)!r}: {type(e).__name__}: {e}"
        ) from e


def kv_heads(args, server_args, attn_tp_size: int) -> tuple[int, int]:
    """(this rank's KV heads, the model's) for an MHA/GQA pool."""
    heads, total = _given(args, "kv_head_num"), _given(args, "total_kv_head_num")
    if heads is not None and total is not None:
        return heads, total
    if total is None:
        total = model_total_kv_heads(server_args)
    if heads is None:
        heads = max(1, total // attn_tp_size)
    item = int(args.kv_item_lens[0])
    page_size = int(args.page_size)
    if heads < 1 or item % (page_size * heads):
        raise ValueError(
            f"derived {heads} KV heads per rank ({total} in the model over attention TP "
            f"{attn_tp_size}), but kv_item_lens {item} is not page_size {page_size} x heads x "
            "head bytes: the pool does not have the model's layout")
    return heads, total
