"""sglang disaggregation backend over pdkv (README "Use with sglang").

``PdkvKVManager``, ``PdkvKVSender``, ``PdkvKVReceiver`` and ``PdkvKVBootstrapServer``
implement sglang's base classes; ``install()`` makes sglang's backend selection return
them for a taken-over name, ``register_on_import()`` (what pdkv's .pth file runs) for the
name ``pdkv``. Importing this package does not import sglang; the classes do, on first use.
"""
from pdkv.integrations.sglang.install import install, install_on_import, register_on_import

__all__ = ["install", "install_on_import", "register_on_import", "PdkvKVManager",
           "PdkvKVSender", "PdkvKVReceiver", "PdkvKVBootstrapServer"]


def __getattr__(name):
    if name in ("PdkvKVManager", "PdkvKVSender", "PdkvKVReceiver", "PdkvKVBootstrapServer"):
        from pdkv.integrations.sglang import conn
        return getattr(conn, name)
    raise AttributeError(f"module 'pdkv.integrations.sglang' has no attribute {name!r}")
