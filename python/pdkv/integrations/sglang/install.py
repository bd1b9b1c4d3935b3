"""sglang's backend selection answering pdkv's names, patched at import time.

The name ``pdkv`` in processes that never load sglang's plugins (``register_on_import``,
run by the ``.pth`` file pdkv's wheel and .deb install), and, for sglang versions without
plugins, the takeover of an existing backend name (``install``).

Takeover: sglang versions with ``sglang.srt.plugins`` need none of it: pdkv's entry point
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

from pdkv.integrations.sglang.plugin import (BACKEND_NAME, backend_enum_with_pdkv,
                                             pdkv_classes, refuse_multimodal)

_UTILS = "sglang.srt.disaggregation.utils"
_PATCHED = "_pdkv_backend_names"  # the names a patched get_kv_class routes to pdkv


DEFAULT_TAKEOVER = "nixl"


def takeover_name() -> str:
    return os.environ.get("PDKV_SGLANG_TAKEOVER") or DEFAULT_TAKEOVER


def _extend_backend_enum(utils) -> None:
    """``utils.TransferBackend`` gains the member ``PDKV``, in utils and in every sglang
    module already holding the old enum (as sglang's REPLACE hook propagates a class)."""
    original = utils.TransferBackend
    extended = backend_enum_with_pdkv(original)
    if extended is original:
        return
    utils.TransferBackend = extended
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("sglang.") and \
                getattr(module, "TransferBackend", None) is original:
            module.TransferBackend = extended


def _patch(utils, takeover: str | None) -> None:
    """sglang's backend selection answers ``pdkv`` (always) and ``takeover`` (when given)
    with pdkv's classes. Names routed by an earlier patch stay routed: the .pth line and
    the launch wrapper may both run in one process."""
    _extend_backend_enum(utils)
    current = utils.get_kv_class
    names = set(getattr(current, _PATCHED, None) or ())
    original = current.__wrapped__ if names else current
    names |= {BACKEND_NAME} | ({takeover} if takeover else set())
    if names == set(getattr(current, _PATCHED, None) or ()):
        return

    def get_kv_class(transfer_backend, class_type, *args, **kwargs):
        # *args/**kwargs: newer sglang passes more (e.g. is_multimodal); they go to
        # sglang's own function untouched.
        name = getattr(transfer_backend, "value", transfer_backend)
        if name in names:
            refuse_multimodal(args, kwargs, name)
            return pdkv_classes(class_type)
        return original(transfer_backend, class_type, *args, **kwargs)

    get_kv_class.__wrapped__ = original
    setattr(get_kv_class, _PATCHED, frozenset(names))
    utils.get_kv_class = get_kv_class
    for module in list(sys.modules.values()):  # modules that did `from ... import`
        if getattr(module, "__name__", "").startswith("sglang.") and \
                getattr(module, "get_kv_class", None) in (original, current):
            module.get_kv_class = get_kv_class


def install(takeover: str | None = None) -> None:
    """Routes ``takeover`` (default: ``PDKV_SGLANG_TAKEOVER`` or "nixl") to pdkv."""
    import importlib
    _patch(importlib.import_module(_UTILS), takeover or takeover_name())
    install_on_import(takeover)  # modules imported later see the patched function too


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Patches sglang's utils module right after it is imported (for .pth start-up)."""

    def __init__(self, takeover: str | None, name_only: bool = False):
        self.takeover, self.name_only = takeover, name_only

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
        loader = spec.loader
        takeover = None if self.name_only else (self.takeover or takeover_name())

        class _Loader(importlib.abc.Loader):
            def create_module(self, s):
                return loader.create_module(s)

            def exec_module(self, module):
                loader.exec_module(module)
                _patch(module, takeover)

        spec.loader = _Loader()
        return spec


def install_on_import(takeover: str | None = None) -> None:
    """Patch sglang's backend selection whenever (and if ever) this process imports it:
    the name ``pdkv`` and the takeover of ``takeover`` (default as for ``install``)."""
    _hook_import(takeover, name_only=False)


def register_on_import() -> None:
    """Only the name ``pdkv`` (no takeover), whenever this process imports sglang's
    backend selection: what pdkv's ``.pth`` file runs at every interpreter start.

    sglang loads plugins (``load_plugins()``) in the processes it starts itself, but not in
    every child it spawns: one version runs its bootstrap server in a
    ``multiprocessing`` spawn child that resolves ``--disaggregation-transfer-backend``
    with ``TransferBackend(...)`` and ``get_kv_class`` and never loads plugins. There the
    entry point never runs, and only start-up code such as a ``.pth`` file reaches the
    fresh interpreter. Adding the name changes nothing for any other backend, and a
    process that also loads the plugin finds the name there already (the plugin then
    registers no enum replacement, and its AROUND hook sees pdkv's wrapper)."""
    _hook_import(None, name_only=True)


def _hook_import(takeover: str | None, name_only: bool) -> None:
    if _UTILS in sys.modules:
        _patch(sys.modules[_UTILS], None if name_only else (takeover or takeover_name()))
    for finder in [f for f in sys.meta_path if isinstance(f, _PatchAfterImport)]:
        if finder.name_only and not name_only:  # a takeover widens a name-only hook
            sys.meta_path.remove(finder)
        else:
            return
    sys.meta_path.insert(0, _PatchAfterImport(takeover, name_only))
