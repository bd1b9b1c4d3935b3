"""``--disaggregation-transfer-backend pdkv`` through sglang's plugin mechanism.

sglang versions with plugins (``sglang.srt.plugins``) load every entry point of the group
``sglang.srt.plugins`` in each of their processes (launcher, tokenizer, schedulers) and
then apply the hooks those entry points registered. pdkv's wheel and .deb declare
``pdkv = pdkv.integrations.sglang.plugin:register``, so an unmodified
``python -m sglang.launch_server`` accepts the backend name ``pdkv``:

- ``TransferBackend`` gains the member ``PDKV`` (sglang builds the enum from the flag's
  value, so the name must be a member), through a class REPLACE hook that sglang also
  propagates to every module holding the old enum;
- the flag's choices gain ``pdkv`` (``server_args.add_disagg_transfer_backend_choices``);
- ``get_kv_class`` is wrapped (AROUND hook): ``pdkv`` returns pdkv's classes, every other
  name sglang's own.

The name ``pdkv`` belongs to no other backend, so none of the places where sglang
branches on a backend *name* (Mooncake's transfer engine, Ascend's config store, NIXL's
memory labels, fake transfers) starts another backend's machinery. Older sglang without
plugins: ``install.py`` (the takeover of an existing name).
"""
from __future__ import annotations

import logging
from enum import Enum

BACKEND_NAME = "pdkv"
_UTILS = "sglang.srt.disaggregation.utils"

log = logging.getLogger("pdkv.sglang")


def pdkv_classes(class_type) -> type | None:
    """pdkv's class for one of sglang's KVClassType members (or its value)."""
    from sglang.srt.disaggregation.base.conn import KVArgs

    from pdkv.integrations.sglang.conn import (PdkvKVBootstrapServer, PdkvKVManager,
                                               PdkvKVReceiver, PdkvKVSender)
    return {"kvargs": KVArgs, "manager": PdkvKVManager, "sender": PdkvKVSender,
            "receiver": PdkvKVReceiver, "bootstrap_server": PdkvKVBootstrapServer
            }.get(getattr(class_type, "value", class_type))


def refuse_multimodal(args, kwargs, name: str) -> None:
    # Newer sglang passes is_multimodal (embedding transfer for encoder disaggregation);
    # pdkv moves KV caches only, and saying so beats returning a class that cannot work.
    if kwargs.get("is_multimodal") or any(args):
        raise ValueError(f"pdkv (--disaggregation-transfer-backend {name}) carries KV caches "
                         "only, not multimodal embeddings")


def kv_class_around(original, transfer_backend, class_type, *args, **kwargs):
    """sglang's AROUND hook on get_kv_class: the name ``pdkv`` selects pdkv's classes."""
    if getattr(transfer_backend, "value", transfer_backend) == BACKEND_NAME:
        refuse_multimodal(args, kwargs, BACKEND_NAME)
        return pdkv_classes(class_type)
    return original(transfer_backend, class_type, *args, **kwargs)


def backend_enum_with_pdkv(backend_enum: type[Enum]) -> type[Enum]:
    """sglang's TransferBackend plus PDKV; the enum itself when it already has it."""
    if BACKEND_NAME in {m.value for m in backend_enum}:
        return backend_enum
    members = {m.name: m.value for m in backend_enum}
    members["PDKV"] = BACKEND_NAME
    extended = Enum(backend_enum.__name__, members)
    extended.__module__ = backend_enum.__module__
    extended.__qualname__ = backend_enum.__qualname__
    return extended


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: registers the hooks sglang applies next."""
    import importlib

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.srt.server_args import add_disagg_transfer_backend_choices

    utils = importlib.import_module(_UTILS)
    extended = backend_enum_with_pdkv(utils.TransferBackend)
    if extended is not utils.TransferBackend:
        HookRegistry.register(f"{_UTILS}.TransferBackend", extended, HookType.REPLACE)
    add_disagg_transfer_backend_choices([BACKEND_NAME])
    HookRegistry.register(f"{_UTILS}.get_kv_class", kv_class_around, HookType.AROUND)
    log.debug("pdkv: registered --disaggregation-transfer-backend %s", BACKEND_NAME)
