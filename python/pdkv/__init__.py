"""pdkv: KV-cache transfer for prefill/decode disaggregated LLM serving.

Sub-modules are imported on demand (``import pdkv.plan``), so importing the package never
fails because one native module is missing. The engine-facing API (``pdkv.KVManager``,
``pdkv.KVSender``, ``pdkv.KVReceiver``, ``pdkv.KVPoll``, ``pdkv.KVArgs``,
``pdkv.BootstrapServer``, ``pdkv.KVTransferError``) lives in ``pdkv.kv`` and is loaded on
first use of one of those names.
"""

_KV_NAMES = ("KVPoll", "KVArgs", "KVTransferError", "BootstrapServer", "KVManager", "KVSender",
             "KVReceiver")

__all__ = ["plan", "kv", *_KV_NAMES]


def __getattr__(name):
    if name in _KV_NAMES:
        from pdkv import kv

        return getattr(kv, name)
    raise AttributeError(f"module 'pdkv' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
