"""For sglang versions without plugins: make an existing backend name select pdkv.

sglang versions with ``sglang.srt.plugins`` need none of this: pdkv's entry point
(``plugin.py``) adds the backend name ``pdkv``. Older versions pick their transfer
classes with ``sglang.srt.disaggregation.utils.get_kv_class`` from
``--disaggregation-transfer-backend``, whose choices are fixed, and have no
module-path factory. ``install()`` wraps that function so one existing backend name (by
default ``nixl``, or ``PDKV_SGLANG_TAKEOVER``) returns pdkv's classes; every other
name keeps sglang's. It patches modules already imported that hold the function and,
through an import hook, those imported later, so it must run in every sglang process:
``python -m pdkv.integrations.sglang.launch_server`` does it (including the scheduler
processes sglang spawns), or a ``.pth`` file that calls ``install_on_import()``.

Why ``nixl``: sglang also branches on the backend *name* outside get_kv_class, and the
other names start another backend's machinery there. ``mooncake``: ModelRunner's
``init_shared_mooncake_transfer_engine`` builds Mooncake's TransferEngine for any
prefill/decode instance (``import mooncake``: ImportError without it, RDMA threads with
it). ``ascend``: the bootstrap server process creates Ascend's config store on node 0
(``import mf_adapter``). ``fake``: sglang treats requests without a bootstrap host as
fake transfers, skips the decode's metadata check and numbers rooms itself. ``nixl``
only makes sglang fill ``KVArgs.kv_data_mem_kinds`` (labels pdkv only compares with
each buffer's real memory kind) and gates opt-in NIXL-only features (packed-terminal start-up, DFlash draft
transfer under decode context parallelism, which pdkv refuses anyway).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

from pdkv.integrations.sglang.plugin import pdkv_classes, refuse_multimodal

_UTILS = "sglang.srt.disaggregation.utils"
_PATCHED = "_pdkv_takeover"


DEFAULT_TAKEOVER = "nixl"


def takeover_name() -> str:
    return os.environ.get("PDKV_SGLANG_TAKEOVER") or DEFAULT_TAKEOVER


def _patch(utils, takeover: str) -> None:
    original = utils.get_kv_class
    if getattr(original, _PATCHED, None) is not None:
        original = original.__wrapped__

    def get_kv_class(transfer_backend, class_type, *args, **kwargs):
        # *args/**kwargs: newer sglang passes more (e.g. is_multimodal); they go to
        # sglang's own function untouched.
        if getattr(transfer_backend, "value", transfer_backend) == takeover:
            refuse_multimodal(args, kwargs, takeover)
            return pdkv_classes(class_type)
        return original(transfer_backend, class_type, *args, **kwargs)

    get_kv_class.__wrapped__ = original
    setattr(get_kv_class, _PATCHED, takeover)
    utils.get_kv_class = get_kv_class
    for module in list(sys.modules.values()):  # modules that did `from ... import`
        if getattr(module, "__name__", "").startswith("sglang.") and \
                getattr(module, "get_kv_class", None) is original:
            module.get_kv_class = get_kv_class


def install(takeover: str | None = None) -> None:
    """Routes ``takeover`` (default: ``PDKV_SGLANG_TAKEOVER`` or "nixl") to pdkv."""
    import importlib
    _patch(importlib.import_module(_UTILS), takeover or takeover_name())
    install_on_import(takeover)  # modules imported later see the patched function too


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Patches sglang's utils module right after it is imported (for .pth start-up)."""

    def __init__(self, takeover: str | None):
        self.takeover = takeover

    def find_spec(self, fullname, path, target=None):
        if fullname != _UTILS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader, takeover = spec.loader, self.takeover

        class _Loader(importlib.abc.Loader):
            def create_module(self, s):
                return loader.create_module(s)

            def exec_module(self, module):
                loader.exec_module(module)
                _patch(module, takeover or takeover_name())

        spec.loader = _Loader()
        return spec


def install_on_import(takeover: str | None = None) -> None:
    """Patch sglang's backend selection whenever (and if ever) this process imports it."""
    if _UTILS in sys.modules:
        _patch(sys.modules[_UTILS], takeover or takeover_name())
    if not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport(takeover))
